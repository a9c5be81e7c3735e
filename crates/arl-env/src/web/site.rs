//! The task site of the web environment: a small shop with a sign-up form,
//! a product search, a wishlist and a three-step checkout. `arl-env` serves
//! it per episode under `/web/e/ID/` ([`crate::web::server`]); every page
//! is a pure function of the episode's [`State`], so `arl-tasks web` can
//! walk the same pages to write reference action sequences.
//!
//! Pages (paths under the episode root): `` (home), `signup`, `search?q=`,
//! `product/SKU`, `wishlist`, `cart`, `checkout/shipping`,
//! `checkout/delivery`, `checkout/review`, `checkout/done`. Forms post to
//! `signup`, `product/SKU/wishlist`, `cart/add`, `cart/remove`,
//! `checkout/shipping`, `checkout/delivery`, `checkout/place`, and every
//! post answers with a redirect (303) to a page, so `back` never posts twice.
//!
//! The state records what was submitted: `signups` (every sign-up form sent),
//! `wishlist`, `cart`, the checkout's `shipping` and `delivery`, and the
//! placed `orders`. [`check_goal`] compares it with a task's label.
pub use arl_env_core::web::esc;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

pub const PLANS: &[&str] = &["Free", "Pro", "Team"];
pub const COUNTRIES: &[&str] = &["Austria", "Brazil", "Canada", "Denmark", "Egypt", "France", "Japan", "Kenya"];
pub const DELIVERIES: &[(&str, &str)] =
    &[("standard", "Standard (5 days)"), ("express", "Express (1 day)"), ("pickup", "Pick up in store")];
/// Most products, cart lines, sign-ups and orders one episode holds.
pub const MAX_ITEMS: usize = 200;
/// Longest submitted field, characters.
pub const MAX_FIELD: usize = 200;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Product {
    pub sku: String,
    pub name: String,
    pub category: String,
    pub price: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Line {
    pub sku: String,
    pub quantity: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    pub products: Vec<Product>,
    #[serde(default)]
    pub signups: Vec<Map<String, Value>>,
    #[serde(default)]
    pub wishlist: Vec<String>,
    #[serde(default)]
    pub cart: Vec<Line>,
    #[serde(default)]
    pub shipping: Option<Map<String, Value>>,
    #[serde(default)]
    pub delivery: Option<String>,
    #[serde(default)]
    pub orders: Vec<Value>,
}

impl State {
    /// The initial state from a task's `metadata.web_setup` (`{"products": […]}`).
    pub fn from_setup(setup: &Value) -> Result<State, String> {
        let s: State = serde_json::from_value(setup.clone()).map_err(|e| format!("`setup`: {e}"))?;
        if s.products.len() > MAX_ITEMS {
            return Err(format!("`setup.products`: at most {MAX_ITEMS}"));
        }
        Ok(s)
    }

    fn product(&self, sku: &str) -> Option<&Product> {
        self.products.iter().find(|p| p.sku == sku)
    }
}

/// What a request gets.
#[derive(Debug, Clone, PartialEq)]
pub enum Resp {
    Page {
        status: u16,
        html: String,
    },
    /// 303 to this path under the episode root.
    Redirect(String),
}

fn page(st: &State, base: &str, title: &str, body: &str) -> String {
    let n: i64 = st.cart.iter().map(|l| l.quantity).sum();
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{t} – Acme Store</title>\
         <style>body{{font-family:sans-serif;max-width:52em;margin:1em auto}}nav a{{margin-right:1em}}li{{margin:.3em 0}}label{{display:block;margin:.5em 0}}</style></head>\
         <body><nav><a id=\"nav-home\" href=\"{base}\">Home</a><a id=\"nav-search\" href=\"{base}search\">Search</a><a id=\"nav-cart\" href=\"{base}cart\">Cart ({n})</a></nav>\
         <h1>{t}</h1>{body}</body></html>",
        t = esc(title)
    )
}

fn ok(html: String) -> Resp {
    Resp::Page { status: 200, html }
}

fn price(c: i64) -> String {
    format!("${}.{:02}", c / 100, c % 100)
}

fn options(id: &str, label: &str, opts: &[(&str, &str)], selected: Option<&str>) -> String {
    let mut s = format!("<label>{} <select id=\"{id}\" name=\"{id}\">", esc(label));
    for (v, t) in opts {
        let sel = if Some(*v) == selected { " selected" } else { "" };
        s += &format!("<option value=\"{}\"{sel}>{}</option>", esc(v), esc(t));
    }
    s + "</select></label>"
}

fn text_input(id: &str, label: &str, value: &str) -> String {
    format!("<label>{} <input type=\"text\" id=\"{id}\" name=\"{id}\" value=\"{}\"></label>", esc(label), esc(value))
}

/// Words of a search (lowercase).
fn matches(p: &Product, q: &str) -> bool {
    let hay = format!("{} {}", p.name, p.category).to_lowercase();
    let words: Vec<String> = q.split_whitespace().map(str::to_lowercase).collect();
    !words.is_empty() && words.iter().all(|w| hay.contains(w.as_str()))
}

/// The products a search lists, in the order shown (by name).
pub fn search(st: &State, q: &str) -> Vec<Product> {
    let mut v: Vec<Product> = st.products.iter().filter(|p| matches(p, q)).cloned().collect();
    v.sort_by(|a, b| a.name.cmp(&b.name).then(a.sku.cmp(&b.sku)));
    v
}

fn query_param(query: &str, k: &str) -> String {
    for kv in query.split('&') {
        let (a, b) = kv.split_once('=').unwrap_or((kv, ""));
        if a == k {
            return url_decode(b);
        }
    }
    String::new()
}

pub fn url_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16) {
                    Ok(x) => {
                        out.push(x);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A GET of `path` (under the episode root, no leading `/`) with its query string.
///
/// Long (about 160 lines) on purpose: the site's route table, one short arm
/// per page; the pages share the episode state the match borrows once.
pub fn get(st: &State, base: &str, path: &str, query: &str) -> Resp {
    let segs: Vec<&str> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        [] => ok(page(
            st,
            base,
            "Welcome",
            &format!(
                "<p>Find products, keep a wishlist, and order.</p><ul><li><a id=\"go-signup\" href=\"{base}signup\">Create an account</a></li>\
                 <li><a id=\"go-search\" href=\"{base}search\">Search products</a></li><li><a id=\"go-wishlist\" href=\"{base}wishlist\">Your wishlist</a></li></ul>"
            ),
        )),
        ["signup"] => {
            let plans: Vec<(&str, &str)> = PLANS.iter().map(|p| (*p, *p)).collect();
            let countries: Vec<(&str, &str)> = COUNTRIES.iter().map(|c| (*c, *c)).collect();
            ok(page(
                st,
                base,
                "Create an account",
                &format!(
                    "<form method=\"post\" action=\"{base}signup\">{}{}{}{}<label><input type=\"checkbox\" id=\"newsletter\" name=\"newsletter\" value=\"yes\"> Send me the newsletter</label>\
                     <button id=\"signup\" type=\"submit\">Sign up</button></form>",
                    text_input("name", "Full name", ""),
                    text_input("email", "Email", ""),
                    options("plan", "Plan", &plans, Some("Free")),
                    options("country", "Country", &countries, None),
                ),
            ))
        }
        ["signup", "done"] => {
            let s = st.signups.last();
            let who = s.and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or("");
            let plan = s.and_then(|m| m.get("plan")).and_then(Value::as_str).unwrap_or("");
            ok(page(st, base, "Welcome aboard", &format!("<p>Thank you, {}. Your {} plan is active.</p>", esc(who), esc(plan))))
        }
        ["search"] => {
            let q = query_param(query, "q");
            let mut body = format!(
                "<form method=\"get\" action=\"{base}search\"><label>Product <input type=\"text\" id=\"q\" name=\"q\" value=\"{}\"></label><button id=\"go\" type=\"submit\">Search</button></form>",
                esc(&q)
            );
            if !q.trim().is_empty() {
                let found = search(st, &q);
                if found.is_empty() {
                    body += &format!("<p>No products match “{}”.</p>", esc(&q));
                } else {
                    body += &format!("<p>{} results for “{}”:</p><ul>", found.len(), esc(&q));
                    for p in &found {
                        body += &format!("<li><a id=\"p-{s}\" href=\"{base}product/{s}\">{}</a> — {}</li>", esc(&p.name), price(p.price), s = esc(&p.sku));
                    }
                    body += "</ul>";
                }
            }
            ok(page(st, base, "Search", &body))
        }
        ["product", sku] => match st.product(sku) {
            None => Resp::Page { status: 404, html: page(st, base, "Not found", "<p>There is no such product.</p>") },
            Some(p) => {
                let qty: Vec<(String, String)> = (1..=5).map(|i| (i.to_string(), i.to_string())).collect();
                let qty: Vec<(&str, &str)> = qty.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
                ok(page(
                    st,
                    base,
                    &p.name,
                    &format!(
                        "<p>Price: {}</p><p>Category: {}</p><p>Item number: {}</p>\
                         <form method=\"post\" action=\"{base}cart/add\"><input type=\"hidden\" name=\"sku\" value=\"{s}\">{}<button id=\"add\" type=\"submit\">Add to cart</button></form>\
                         <form method=\"post\" action=\"{base}product/{s}/wishlist\"><button id=\"wish\" type=\"submit\">Add to wishlist</button></form>",
                        price(p.price),
                        esc(&p.category),
                        esc(&p.sku),
                        options("quantity", "Quantity", &qty, Some("1")),
                        s = esc(&p.sku)
                    ),
                ))
            }
        },
        ["wishlist"] => {
            let mut body = String::new();
            if st.wishlist.is_empty() {
                body += "<p>Your wishlist is empty.</p>";
            } else {
                body += "<ul>";
                for s in &st.wishlist {
                    let name = st.product(s).map_or(s.as_str(), |p| p.name.as_str());
                    body += &format!("<li>{}</li>", esc(name));
                }
                body += "</ul>";
            }
            ok(page(st, base, "Wishlist", &body))
        }
        ["cart"] => {
            let mut body = String::new();
            if st.cart.is_empty() {
                body += "<p>Your cart is empty.</p>";
            } else {
                body += "<ul>";
                let mut total = 0;
                for l in &st.cart {
                    let p = st.product(&l.sku);
                    total += p.map_or(0, |p| p.price) * l.quantity;
                    body += &format!(
                        "<li>{} × {} <form method=\"post\" action=\"{base}cart/remove\" style=\"display:inline\"><input type=\"hidden\" name=\"sku\" value=\"{s}\"><button id=\"rm-{s}\" type=\"submit\">Remove</button></form></li>",
                        l.quantity,
                        esc(p.map_or(l.sku.as_str(), |p| p.name.as_str())),
                        s = esc(&l.sku)
                    );
                }
                body += &format!("</ul><p>Total: {}</p><p><a id=\"checkout\" href=\"{base}checkout/shipping\">Proceed to checkout</a></p>", price(total));
            }
            ok(page(st, base, "Cart", &body))
        }
        ["checkout", "shipping"] => {
            let g = |k: &str| st.shipping.as_ref().and_then(|m| m.get(k)).and_then(Value::as_str).unwrap_or("").to_string();
            let err = if query_param(query, "missing") == "1" { "<p><b>Please fill in every field.</b></p>" } else { "" };
            ok(page(
                st,
                base,
                "Checkout: shipping address (step 1 of 3)",
                &format!(
                    "{err}<form method=\"post\" action=\"{base}checkout/shipping\">{}{}{}{}<button id=\"next\" type=\"submit\">Continue</button></form>",
                    text_input("fullname", "Full name", &g("name")),
                    text_input("street", "Street", &g("street")),
                    text_input("city", "City", &g("city")),
                    text_input("zip", "Postal code", &g("zip")),
                ),
            ))
        }
        ["checkout", "delivery"] => ok(page(
            st,
            base,
            "Checkout: delivery (step 2 of 3)",
            &format!(
                "<form method=\"post\" action=\"{base}checkout/delivery\">{}<button id=\"next\" type=\"submit\">Continue</button></form>",
                options("delivery", "Delivery", DELIVERIES, st.delivery.as_deref().or(Some("standard")))
            ),
        )),
        ["checkout", "review"] => {
            let mut body = String::from("<ul>");
            for l in &st.cart {
                body += &format!("<li>{} × {}</li>", l.quantity, esc(st.product(&l.sku).map_or(l.sku.as_str(), |p| p.name.as_str())));
            }
            body += "</ul>";
            let g = |k: &str| st.shipping.as_ref().and_then(|m| m.get(k)).and_then(Value::as_str).unwrap_or("").to_string();
            body += &format!("<p>Ship to: {}, {}, {} {}</p>", esc(&g("name")), esc(&g("street")), esc(&g("zip")), esc(&g("city")));
            let d = st.delivery.as_deref().and_then(|d| DELIVERIES.iter().find(|x| x.0 == d)).map_or("(not chosen)", |x| x.1);
            body += &format!("<p>Delivery: {}</p>", esc(d));
            body += &format!("<form method=\"post\" action=\"{base}checkout/place\"><button id=\"place\" type=\"submit\">Place order</button></form>");
            ok(page(st, base, "Checkout: review (step 3 of 3)", &body))
        }
        ["checkout", "done"] => {
            let n = st.orders.len();
            let body = if n == 0 { "<p>No order was placed.</p>".to_string() } else { format!("<p>Order #{n} is placed. Thank you!</p>") };
            ok(page(st, base, "Order placed", &body))
        }
        _ => Resp::Page { status: 404, html: page(st, base, "Not found", "<p>There is no such page.</p>") },
    }
}

fn field(form: &[(String, String)], k: &str) -> String {
    form.iter().rev().find(|(a, _)| a == k).map(|(_, v)| v.trim().chars().take(MAX_FIELD).collect()).unwrap_or_default()
}

fn bad(st: &State, base: &str, msg: &str) -> Resp {
    Resp::Page { status: 422, html: page(st, base, "Something is missing", &format!("<p>{}</p>", esc(msg))) }
}

/// A form POST to `path`.
pub fn post(st: &mut State, base: &str, path: &str, form: &[(String, String)]) -> Resp {
    let segs: Vec<&str> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        ["signup"] => {
            if st.signups.len() >= MAX_ITEMS {
                return bad(st, base, "too many sign-ups");
            }
            let mut m = Map::new();
            for k in ["name", "email", "plan", "country"] {
                m.insert(k.into(), json!(field(form, k)));
            }
            m.insert("newsletter".into(), json!(field(form, "newsletter") == "yes"));
            st.signups.push(m);
            Resp::Redirect("signup/done".into())
        }
        ["product", sku, "wishlist"] => {
            if st.product(sku).is_none() {
                return bad(st, base, "no such product");
            }
            if !st.wishlist.iter().any(|s| s == sku) {
                st.wishlist.push(sku.to_string());
            }
            Resp::Redirect("wishlist".into())
        }
        ["cart", "add"] => {
            let sku = field(form, "sku");
            if st.product(&sku).is_none() {
                return bad(st, base, "no such product");
            }
            let q: i64 = field(form, "quantity").parse().unwrap_or(0);
            if !(1..=5).contains(&q) {
                return bad(st, base, "the quantity must be 1 to 5");
            }
            let full = st.cart.len() >= MAX_ITEMS;
            match st.cart.iter_mut().find(|l| l.sku == sku) {
                Some(l) => l.quantity = (l.quantity + q).min(99),
                None if !full => st.cart.push(Line { sku, quantity: q }),
                None => return bad(st, base, "the cart is full"),
            }
            Resp::Redirect("cart".into())
        }
        ["cart", "remove"] => {
            let sku = field(form, "sku");
            st.cart.retain(|l| l.sku != sku);
            Resp::Redirect("cart".into())
        }
        ["checkout", "shipping"] => {
            let mut m = Map::new();
            for (k, f) in [("name", "fullname"), ("street", "street"), ("city", "city"), ("zip", "zip")] {
                m.insert(k.into(), json!(field(form, f)));
            }
            let complete = m.values().all(|v| v.as_str().is_some_and(|s| !s.is_empty()));
            st.shipping = Some(m);
            Resp::Redirect(if complete { "checkout/delivery" } else { "checkout/shipping?missing=1" }.into())
        }
        ["checkout", "delivery"] => {
            let d = field(form, "delivery");
            if !DELIVERIES.iter().any(|x| x.0 == d) {
                return bad(st, base, "choose a delivery option");
            }
            st.delivery = Some(d);
            Resp::Redirect("checkout/review".into())
        }
        ["checkout", "place"] => {
            if st.cart.is_empty() {
                return bad(st, base, "your cart is empty");
            }
            let complete =
                st.shipping.as_ref().is_some_and(|m| m.values().all(|v| v.as_str().is_some_and(|s| !s.is_empty())));
            if !complete {
                return bad(st, base, "the shipping address is missing (step 1)");
            }
            let Some(d) = st.delivery.clone() else { return bad(st, base, "no delivery option is chosen (step 2)") };
            if st.orders.len() >= MAX_ITEMS {
                return bad(st, base, "too many orders");
            }
            st.orders.push(
                json!({"order_id": st.orders.len() + 1, "items": st.cart, "shipping": st.shipping, "delivery": d}),
            );
            st.cart.clear();
            Resp::Redirect("checkout/done".into())
        }
        _ => Resp::Page { status: 404, html: page(st, base, "Not found", "<p>There is no such form.</p>") },
    }
}

/// The ids of the elements the observation numbers, in order (element
/// [N] is the N-th): the `id`s of the links, buttons, inputs (not hidden)
/// and drop-downs of a page of this site.
pub fn element_ids(html: &str) -> Vec<String> {
    let re = regex::Regex::new(r#"<(a|button|input|select|textarea)\b([^>]*)>"#).expect("static regex");
    let id = regex::Regex::new(r#"\bid="([^"]+)""#).expect("static regex");
    re.captures_iter(html)
        .filter(|c| !c[2].contains("type=\"hidden\""))
        .filter_map(|c| id.captures(&c[2]).map(|m| m[1].to_string()))
        .collect()
}

fn norm(v: &Value) -> String {
    match v {
        Value::String(s) => s.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase(),
        x => x.to_string(),
    }
}

fn same_fields(got: &Value, want: &Value) -> Option<String> {
    let w = want.as_object()?;
    for (k, v) in w {
        let g = got.get(k).cloned().unwrap_or(Value::Null);
        if norm(&g) != norm(v) {
            return Some(format!("`{k}` is {g}, expected {v}"));
        }
    }
    None
}

/// Compares the final state with a goal (the label): `signup` (the fields
/// of the last sign-up), `wishlist` (the set of SKUs), `orders` (the placed
/// orders: items, shipping fields, delivery). Text compares trimmed, with
/// spaces collapsed and case ignored. `Ok(None)` when met, else what differs.
pub fn check_goal(st: &State, goal: &Value) -> Result<Option<String>, String> {
    let g = goal.as_object().ok_or("expected an object with `signup`, `wishlist` and/or `orders`")?;
    if g.is_empty() || g.keys().any(|k| !["signup", "wishlist", "orders"].contains(&k.as_str())) {
        return Err("expected an object with `signup`, `wishlist` and/or `orders`".into());
    }
    if let Some(want) = g.get("signup") {
        match st.signups.last() {
            None => return Ok(Some("no sign-up was submitted".into())),
            Some(got) => {
                if let Some(d) = same_fields(&Value::Object(got.clone()), want) {
                    return Ok(Some(format!("sign-up: {d}")));
                }
            }
        }
    }
    if let Some(want) = g.get("wishlist") {
        let mut w: Vec<String> =
            want.as_array().ok_or("`wishlist`: expected a list of SKUs")?.iter().map(norm).collect();
        let mut got: Vec<String> = st.wishlist.iter().map(|s| norm(&json!(s))).collect();
        w.sort();
        got.sort();
        if w != got {
            return Ok(Some(format!("the wishlist holds {:?}, expected {:?}", st.wishlist, want)));
        }
    }
    if let Some(want) = g.get("orders") {
        let want = want.as_array().ok_or("`orders`: expected a list")?;
        if want.len() != st.orders.len() {
            return Ok(Some(format!("{} orders placed, expected {}", st.orders.len(), want.len())));
        }
        for (i, (w, got)) in want.iter().zip(&st.orders).enumerate() {
            let (wi, gi) =
                (w.get("items").cloned().unwrap_or(json!([])), got.get("items").cloned().unwrap_or(json!([])));
            let key = |v: &Value| {
                let mut x: Vec<(String, i64)> = v
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|l| {
                        (
                            norm(l.get("sku").unwrap_or(&Value::Null)),
                            l.get("quantity").and_then(Value::as_i64).unwrap_or(0),
                        )
                    })
                    .collect();
                x.sort();
                x
            };
            if key(&wi) != key(&gi) {
                return Ok(Some(format!("order {}: items {gi}, expected {wi}", i + 1)));
            }
            if let Some(ws) = w.get("shipping") {
                if let Some(d) = same_fields(got.get("shipping").unwrap_or(&Value::Null), ws) {
                    return Ok(Some(format!("order {}: shipping {d}", i + 1)));
                }
            }
            if let Some(wd) = w.get("delivery") {
                if norm(got.get("delivery").unwrap_or(&Value::Null)) != norm(wd) {
                    return Ok(Some(format!(
                        "order {}: delivery {}, expected {wd}",
                        i + 1,
                        got.get("delivery").unwrap_or(&Value::Null)
                    )));
                }
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st() -> State {
        State::from_setup(&json!({"products": [{"sku": "K1", "name": "Steel kettle", "category": "home", "price": 2500}, {"sku": "K2", "name": "Glass kettle", "category": "home", "price": 1900}]})).unwrap()
    }

    #[test]
    fn search_lists_by_name_and_ids_count_elements() {
        let s = st();
        let Resp::Page { html, .. } = get(&s, "/web/e/x/", "search", "q=kettle") else { panic!() };
        assert_eq!(element_ids(&html), ["nav-home", "nav-search", "nav-cart", "q", "go", "p-K2", "p-K1"]);
        let Resp::Page { html, .. } = get(&s, "/web/e/x/", "product/K1", "") else { panic!() };
        assert_eq!(element_ids(&html), ["nav-home", "nav-search", "nav-cart", "quantity", "add", "wish"]);
    }

    #[test]
    fn checkout_records_the_order_and_goal_checks() {
        let mut s = st();
        let b = "/web/e/x/";
        let f = |v: &[(&str, &str)]| v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<Vec<_>>();
        assert_eq!(post(&mut s, b, "checkout/place", &[]), bad(&s.clone(), b, "your cart is empty"));
        assert_eq!(post(&mut s, b, "cart/add", &f(&[("sku", "K2"), ("quantity", "2")])), Resp::Redirect("cart".into()));
        assert_eq!(
            post(&mut s, b, "checkout/shipping", &f(&[("fullname", "A B"), ("street", "1 Road"), ("city", "")])),
            Resp::Redirect("checkout/shipping?missing=1".into())
        );
        post(
            &mut s,
            b,
            "checkout/shipping",
            &f(&[("fullname", "A B"), ("street", "1 Road"), ("city", "Oslo"), ("zip", "0150")]),
        );
        post(&mut s, b, "checkout/delivery", &f(&[("delivery", "express")]));
        assert_eq!(post(&mut s, b, "checkout/place", &[]), Resp::Redirect("checkout/done".into()));
        assert!(s.cart.is_empty());
        let goal = json!({"orders": [{"items": [{"sku": "K2", "quantity": 2}], "shipping": {"name": "a  b", "city": "Oslo"}, "delivery": "express"}]});
        assert_eq!(check_goal(&s, &goal).unwrap(), None);
        let goal = json!({"orders": [{"items": [{"sku": "K2", "quantity": 1}]}]});
        assert!(check_goal(&s, &goal).unwrap().unwrap().contains("items"));
        assert!(check_goal(&s, &json!({"wishlist": ["K1"]})).unwrap().is_some());
        assert!(check_goal(&s, &json!({"bogus": 1})).is_err());
    }

    #[test]
    fn decodes_forms() {
        assert_eq!(url_decode("a+b%21%zz%4"), "a b!%zz%4");
    }
}
