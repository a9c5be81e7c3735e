// The observation of a page: visible text in document order, with every
// visible interactive element numbered [N] (the number is written to the
// element's data-arl-id attribute, where click/type/select find it).
// Numbering covers the whole document, so it does not change with
// scrolling; text and elements scrolled above the viewport are left out.
(() => {
  for (const e of document.querySelectorAll('[data-arl-id]')) e.removeAttribute('data-arl-id');
  const lines = [];
  let line = '';
  let n = 0;
  const clean = (s) => (s || '').replace(/\s+/g, ' ').trim();
  const q = (s) => JSON.stringify(clean(s).slice(0, 120));
  const flush = () => { const t = clean(line); if (t) lines.push(t); line = ''; };
  const SKIP = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'HEAD', 'META', 'LINK', 'SVG', 'IFRAME']);
  const INLINE = new Set(['A', 'SPAN', 'B', 'I', 'EM', 'STRONG', 'SMALL', 'CODE', 'LABEL', 'ABBR', 'SUB', 'SUP', 'MARK', 'U', 'S', 'TIME', 'IMG', 'INPUT', 'BUTTON', 'SELECT', 'TEXTAREA', 'OUTPUT', 'DATA', 'Q', 'CITE', 'KBD', 'VAR']);
  const TEXTISH = new Set(['text', 'email', 'search', 'tel', 'url', 'number', 'password', 'date', 'time', 'datetime-local', 'month', 'week', '']);
  const visible = (el) => {
    const s = getComputedStyle(el);
    if (s.display === 'none' || s.visibility === 'hidden' || s.visibility === 'collapse') return false;
    if (s.display === 'contents') return true;
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0;
  };
  const tag = (el) => { n += 1; el.setAttribute('data-arl-id', String(n)); return '[' + n + ']'; };
  const above = (el) => el.getBoundingClientRect().bottom <= 0;
  const name = (el) => el.getAttribute('aria-label') || el.getAttribute('placeholder') || el.getAttribute('title') || el.getAttribute('name') || '';
  function walk(node) {
    if (node.nodeType === 3) {
      const p = node.parentElement;
      if (!p || !above(p)) line += node.textContent;
      return;
    }
    if (node.nodeType !== 1) return;
    const el = node;
    const t = el.tagName;
    if (SKIP.has(t) || !visible(el)) return;
    const hide = above(el);
    const role = el.getAttribute('role');
    let item = null;
    if (t === 'A' && el.hasAttribute('href')) {
      el.target = '_self';
      item = ['link', q(el.innerText || name(el))];
    } else if (t === 'BUTTON' || role === 'button' || (t === 'INPUT' && ['submit', 'button', 'reset', 'image'].includes(el.type))) {
      item = ['button', q(t === 'INPUT' ? (el.value || name(el)) : (el.innerText || name(el)))];
    } else if (t === 'INPUT' && (el.type === 'checkbox' || el.type === 'radio')) {
      item = [el.type, q(name(el) || el.value), el.checked ? '(checked)' : '(not checked)'];
    } else if (t === 'INPUT' && el.type !== 'hidden') {
      item = ['textbox', q(name(el)), 'value=' + JSON.stringify(el.value)];
      if (!TEXTISH.has(el.type)) item[0] = el.type;
    } else if (t === 'TEXTAREA') {
      item = ['textarea', q(name(el)), 'value=' + JSON.stringify(el.value)];
    } else if (t === 'SELECT') {
      const opts = Array.from(el.options).map((o) => JSON.stringify(clean(o.text)));
      const sel = el.selectedIndex >= 0 ? clean(el.options[el.selectedIndex].text) : '';
      item = ['select', q(name(el)), 'options: ' + opts.join(', '), 'selected=' + JSON.stringify(sel)];
    }
    if (item) {
      const id = tag(el);
      if (el.form) el.form.target = '_self';
      if (!hide) {
        if (el.disabled) item.push('(disabled)');
        line += ' ' + id + ' ' + item.filter((x) => x !== '""').join(' ') + ' ';
      }
      return;
    }
    const block = !INLINE.has(t);
    if (block) flush();
    for (const c of el.childNodes) walk(c);
    if (block) flush();
  }
  if (document.body) walk(document.body);
  flush();
  const de = document.documentElement;
  return {
    title: document.title,
    url: location.href,
    lines: lines,
    scroll_y: Math.round(window.scrollY),
    page_height: Math.round(de ? de.scrollHeight : 0),
    viewport: window.innerHeight,
    ready: document.readyState,
  };
})()
