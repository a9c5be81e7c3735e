//! `web`: goals on the web environment's task site ([`arl_env::web::site`]),
//! reached in a browser: sign up with given details (a form), put the
//! cheapest product of a kind on the wishlist (search and pick), buy some
//! units of a product with a given address and delivery (a multi-page
//! checkout). The site's initial state is `metadata.web_setup`, the goal
//! (what the site must have recorded) the label, which `arl-reward --rm web`
//! checks.
//!
//! With solutions, `response` holds the reference browser calls, computed by
//! walking the same pages the site serves (element numbers included), so
//! `arl-reward --rm web` can replay them; the demonstration's tool turns
//! hold each page's title and path only, not the whole observation.
use super::{tool_call, Task, MAX_LEVEL};
use arl_core::rng::Rng;
use arl_env::web::site::{self, element_ids, Line, Product, Resp, State, COUNTRIES, DELIVERIES, PLANS};
use serde_json::{json, Map, Value};

const NOUNS: &[(&str, &str)] = &[
    ("kettle", "kitchen"),
    ("lamp", "home"),
    ("backpack", "travel"),
    ("headphones", "audio"),
    ("mug", "kitchen"),
    ("umbrella", "travel"),
    ("notebook", "office"),
    ("blender", "kitchen"),
];
const ADJS: &[&str] = &["Steel", "Glass", "Travel", "Compact", "Deluxe", "Classic", "Mini", "Smart", "Bamboo", "Retro"];
const FIRST: &[&str] = &["Ada", "Bruno", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hana", "Ivo", "Julia"];
const LAST: &[&str] = &["Lind", "Moreau", "Okafor", "Park", "Quist", "Rossi", "Sato", "Torres", "Ueda", "Vance"];
const STREETS: &[&str] = &["Harbor Road", "Elm Street", "Mill Lane", "Station Square", "Lake Avenue"];
const CITIES: &[&str] = &["Oslo", "Porto", "Quebec", "Riga", "Seville", "Turku"];

/// Where the simulated browser is: the current page's HTML and path.
struct Sim {
    st: State,
    base: String,
    html: String,
    path: String,
    calls: Vec<(String, String)>,
}

impl Sim {
    fn load(&mut self, path: &str) {
        let (p, q) = path.split_once('?').unwrap_or((path, ""));
        self.path = path.to_string();
        self.html = match site::get(&self.st, &self.base, p, q) {
            Resp::Page { html, .. } => html,
            Resp::Redirect(to) => return self.load(&to),
        };
    }

    fn submit(&mut self, path: &str, form: &[(&str, String)]) {
        let form: Vec<(String, String)> = form.iter().map(|(a, b)| (a.to_string(), b.clone())).collect();
        let base = self.base.clone();
        match site::post(&mut self.st, &base, path, &form) {
            Resp::Redirect(to) => self.load(&to),
            Resp::Page { html, .. } => self.html = html,
        }
    }

    fn id(&self, key: &str) -> i64 {
        let ids = element_ids(&self.html);
        ids.iter()
            .position(|k| k == key)
            .map(|i| i as i64 + 1)
            .unwrap_or_else(|| panic!("no element `{key}` on {}: {ids:?}", self.path))
    }

    fn call(&mut self, name: &str, args: Value) {
        let title = regex::Regex::new("<title>([^<]*)</title>")
            .expect("static")
            .captures(&self.html)
            .map(|c| c[1].to_string())
            .unwrap_or_default();
        let obs = format!("Title: {}\nURL: /{}", title.replace("&amp;", "&"), self.path);
        self.calls.push((tool_call(name, &args), obs));
    }
}

fn setup(rng: &mut Rng, level: u32) -> State {
    let mut nouns = NOUNS.to_vec();
    rng.shuffle(&mut nouns);
    let kinds = (2 + level as usize / 3).min(nouns.len());
    let per = (2 + level as usize / 2).min(ADJS.len());
    let mut products = Vec::new();
    let mut prices: Vec<i64> = Vec::new();
    for (noun, cat) in &nouns[..kinds] {
        let mut adjs = ADJS.to_vec();
        rng.shuffle(&mut adjs);
        for adj in &adjs[..per] {
            let mut p = rng.range(5, 120) * 100 + *rng.choose(&[0, 49, 99]);
            while prices.contains(&p) {
                p += 100;
            }
            prices.push(p);
            products.push(Product {
                sku: format!("A{}", 100 + products.len() * 13 + rng.below(13) as usize),
                name: format!("{adj} {noun}"),
                category: cat.to_string(),
                price: p,
            });
        }
    }
    rng.shuffle(&mut products);
    State { products, ..State::default() }
}

pub fn generate(rng: &mut Rng, level: u32) -> Task {
    let level = level.clamp(1, MAX_LEVEL);
    let st = setup(rng, level);
    let initial = st.clone();
    let mut sim = Sim { st, base: "/web/e/EPISODE/".into(), html: String::new(), path: String::new(), calls: vec![] };
    let kind = rng.below(3);
    let (goal_text, label) = match kind {
        0 => {
            let (f, l) = (*rng.choose(FIRST), *rng.choose(LAST));
            let name = format!("{f} {l}");
            let email = format!("{}.{}@example.com", f.to_lowercase(), l.to_lowercase());
            let plan = *rng.choose(PLANS);
            let country = *rng.choose(COUNTRIES);
            let news = rng.bool(0.5);
            sim.call("open", json!({"url": "/signup"}));
            sim.load("signup");
            let ids: Vec<i64> =
                ["name", "email", "plan", "country", "newsletter", "signup"].iter().map(|k| sim.id(k)).collect();
            sim.call("type", json!({"id": ids[0], "text": name}));
            sim.call("type", json!({"id": ids[1], "text": email}));
            sim.call("select", json!({"id": ids[2], "value": plan}));
            sim.call("select", json!({"id": ids[3], "value": country}));
            if news {
                sim.call("click", json!({"id": ids[4]}));
            }
            sim.submit(
                "signup",
                &[
                    ("name", name.clone()),
                    ("email", email.clone()),
                    ("plan", plan.into()),
                    ("country", country.into()),
                    ("newsletter", if news { "yes".into() } else { String::new() }),
                ],
            );
            sim.call("click", json!({"id": ids[5]}));
            let news_text =
                if news { "and subscribe to the newsletter" } else { "without subscribing to the newsletter" };
            (
                format!(
                    "Create an account for {name} (email {email}) on the {plan} plan, country {country}, {news_text}."
                ),
                json!({"signup": {"name": name, "email": email, "plan": plan, "country": country, "newsletter": news}}),
            )
        }
        1 => {
            let noun = sim.st.products[rng.below(sim.st.products.len() as u64) as usize]
                .name
                .split(' ')
                .nth(1)
                .unwrap_or("")
                .to_string();
            let cheapest = sim
                .st
                .products
                .iter()
                .filter(|p| p.name.ends_with(&format!(" {noun}")))
                .min_by_key(|p| p.price)
                .cloned()
                .expect("the noun's products");
            sim.call("open", json!({"url": "/search"}));
            sim.load("search");
            let q = sim.id("q");
            sim.load(&format!("search?q={noun}"));
            sim.call("type", json!({"id": q, "text": noun, "press_enter": true}));
            let p = sim.id(&format!("p-{}", cheapest.sku));
            sim.load(&format!("product/{}", cheapest.sku));
            sim.call("click", json!({"id": p}));
            let w = sim.id("wish");
            sim.submit(&format!("product/{}/wishlist", cheapest.sku), &[]);
            sim.call("click", json!({"id": w}));
            (
                format!("Find the cheapest {noun} in the shop and add it (only it) to the wishlist."),
                json!({"wishlist": [cheapest.sku]}),
            )
        }
        _ => {
            let prod = sim.st.products[rng.below(sim.st.products.len() as u64) as usize].clone();
            let qty = rng.range(1, 3);
            let name = format!("{} {}", rng.choose(FIRST), rng.choose(LAST));
            let street = format!("{} {}", rng.range(1, 99), rng.choose(STREETS));
            let city = rng.choose(CITIES).to_string();
            let zip = format!("{}", rng.range(1000, 9999));
            let (dval, dtext) = *rng.choose(DELIVERIES);
            sim.call("open", json!({"url": "/search"}));
            sim.load("search");
            let q = sim.id("q");
            sim.load(&format!("search?q={}", prod.name.replace(' ', "+")));
            sim.call("type", json!({"id": q, "text": prod.name, "press_enter": true}));
            let p = sim.id(&format!("p-{}", prod.sku));
            sim.load(&format!("product/{}", prod.sku));
            sim.call("click", json!({"id": p}));
            let (qid, add) = (sim.id("quantity"), sim.id("add"));
            sim.call("select", json!({"id": qid, "value": qty.to_string()}));
            sim.submit("cart/add", &[("sku", prod.sku.clone()), ("quantity", qty.to_string())]);
            sim.call("click", json!({"id": add}));
            let c = sim.id("checkout");
            sim.load("checkout/shipping");
            sim.call("click", json!({"id": c}));
            let ids: Vec<i64> = ["fullname", "street", "city", "zip", "next"].iter().map(|k| sim.id(k)).collect();
            for (i, v) in [&name, &street, &city, &zip].iter().enumerate() {
                sim.call("type", json!({"id": ids[i], "text": v}));
            }
            sim.submit(
                "checkout/shipping",
                &[("fullname", name.clone()), ("street", street.clone()), ("city", city.clone()), ("zip", zip.clone())],
            );
            sim.call("click", json!({"id": ids[4]}));
            let (d, n) = (sim.id("delivery"), sim.id("next"));
            sim.call("select", json!({"id": d, "value": dtext}));
            sim.submit("checkout/delivery", &[("delivery", dval.to_string())]);
            sim.call("click", json!({"id": n}));
            let place = sim.id("place");
            sim.submit("checkout/place", &[]);
            sim.call("click", json!({"id": place}));
            let units = if qty == 1 { "1 unit".to_string() } else { format!("{qty} units") };
            (
                format!("Buy {units} of the {} (nothing else) and ship it to {name}, {street}, {zip} {city}, with the delivery option \"{dtext}\". Complete the checkout.", prod.name),
                json!({"orders": [{"items": [Line { sku: prod.sku.clone(), quantity: qty }], "shipping": {"name": name, "street": street, "city": city, "zip": zip}, "delivery": dval}]}),
            )
        }
    };
    debug_assert_eq!(site::check_goal(&sim.st, &label), Ok(None), "the reference walk reaches the goal");
    let prompt = format!(
        "You are using a web browser on a small online shop through the tools open(url), click(id), type(id, text), select(id, value), scroll(direction) and back(). \
         Each returns the page as text, with its links, buttons and form fields numbered [N]. Start with open(\"/\"). Task: {goal_text} When the task is done, say `Done.`"
    );
    let mut meta = Map::new();
    meta.insert("web_setup".into(), json!(initial));
    meta.insert("kind".into(), json!(["signup", "wishlist", "checkout"][kind as usize]));
    Task::tool_walk(prompt, label, &sim.calls, "Done.", meta, arl_env::web::definitions())
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_kind_reaches_its_goal_in_the_simulation() {
        for i in 0..60 {
            let mut rng = arl_core::rng::Rng::new(arl_core::rng::mix(&[7, i]));
            let t = super::generate(&mut rng, 1 + (i % 10) as u32);
            assert!(t.response.contains("<tool_call>"));
        }
    }
}
