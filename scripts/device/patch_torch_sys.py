#!/usr/bin/env python3
"""torch-sys 0.26 (made for libtorch 2.13) made to compile against libtorch
2.11, for `make device-bundle` (scripts/device-bundle.sh).

    patch_torch_sys.py SRC DEST

copies the torch-sys source tree SRC to DEST and rewrites, in
libtch/torch_api_generated.cpp, the C wrappers of the operators that 2.11
lacks or declares with other arguments: each one's body becomes an error
(thrown inside the wrapper's own PROTECT, so tch returns it as an `Err`, or
panics in its non-`f_` API) naming the operator. Everything else is
unchanged. None of these operators is used by arl: Philox random keys, the
Lanczos upsampler, a flash-attention in-place variant and an MPS-only
attention.

The list is what `LIBTORCH_BYPASS_VERSION_CHECK=1 cargo build` of tch 0.26
against the torch==2.11.0 wheel reports (15 errors, all in this file). If the
pinned versions change, the build names any new mismatch and this list is
where it goes.
"""
import os
import re
import shutil
import sys

MISSING_IN_2_11 = [
    "_flash_attention_forward_no_dropout_inplace",
    "_philox_key_fold_in",
    "_philox_key_split",
    "_philox_normal",
    "_philox_normal_",
    "_philox_normal_out",
    "_philox_uniform",
    "_philox_uniform_",
    "_philox_uniform_out",
    "_scaled_dot_product_attention_math_for_mps",  # 2.13 added enable_gqa
    "_upsample_lanczos2d_aa",
    "_upsample_lanczos2d_aa_backward",
    "_upsample_lanczos2d_aa_backward_grad_input",
    "_upsample_lanczos2d_aa_out",
    "_upsample_lanczos2d_aa_vec",
]


def patched(src):
    """The wrappers' file of `src` with those operators made errors."""
    text = open(os.path.join(src, "libtch", "torch_api_generated.cpp")).read()
    for name in MISSING_IN_2_11:
        pat = re.compile(r"(void atg_" + re.escape(name) + r"\([^)]*\) \{\n  PROTECT\(\n)(.*?)(\n  \)\n\})", re.S)
        body = (f'    throw std::runtime_error("torch::{name} is not in the libtorch this binary was built against '
                f'(torch 2.11, for the device bundle; tch 0.26 is made for 2.13)");')
        text, n = pat.subn(lambda m: m.group(1) + body + m.group(3), text)
        if n != 1:
            sys.exit(f"patch_torch_sys: expected one wrapper atg_{name} in {src}, found {n}")
    if "#include <stdexcept>" not in text:
        text = "#include <stdexcept>\n" + text
    return text


def main(src, dest):
    text = patched(src)
    path = os.path.join(dest, "libtch", "torch_api_generated.cpp")
    stamp = os.path.join(dest, ".arl-patched-from")
    # Done before from the same source: left as it is, so cargo does not
    # rebuild torch-sys (its build script watches these files' times).
    if os.path.exists(stamp) and open(stamp).read() == src and os.path.exists(path) and open(path).read() == text:
        return
    if os.path.exists(dest):
        shutil.rmtree(dest)
    shutil.copytree(src, dest)
    with open(path, "w") as f:
        f.write(text)
    with open(stamp, "w") as f:
        f.write(src)
    print(f"patch_torch_sys: {len(MISSING_IN_2_11)} wrappers made errors in {path}", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    main(sys.argv[1], sys.argv[2])
