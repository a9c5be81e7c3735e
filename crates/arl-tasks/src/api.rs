//! `api`: goal-directed tasks in the shop service of `arl-env`
//! ([`arl_env::shop`]): order some units of an item, of the cheapest item of a
//! category, cancel an item's orders, restock an item to a level. The initial
//! state is `metadata.api_setup` (rollout starts each episode from it), the
//! goal is the label (the final placed orders and/or stock levels that
//! `arl-reward --rm api` checks in the service).
//!
//! With solutions, the demonstration makes the calls a careful agent would
//! (look first, then act); the tool turns hold what the service answers,
//! computed here with the same state machine.
use super::{tool_call, Task, MAX_LEVEL};
use arl_core::rng::Rng;
use arl_env::shop::{Item, Order, Shop};
use serde_json::{json, Map, Value};

const NAMES: &[&str] = &[
    "desk lamp",
    "kettle",
    "chess set",
    "atlas",
    "rake",
    "drum",
    "hand saw",
    "novel",
    "puzzle",
    "garden hose",
    "flute",
    "wall map",
    "vase",
    "drill",
];
const CATEGORIES: &[&str] = &["home", "games", "tools", "garden", "music"];

fn setup(rng: &mut Rng, level: u32) -> Shop {
    let n = (4 + level as usize).min(NAMES.len());
    let mut names: Vec<&str> = NAMES.to_vec();
    rng.shuffle(&mut names);
    let items = names[..n]
        .iter()
        .enumerate()
        .map(|(i, name)| Item {
            sku: format!("SKU-{}", 100 + i * 7 + rng.below(7) as usize),
            name: name.to_string(),
            category: rng.choose(CATEGORIES).to_string(),
            price: rng.range(2, 90),
            stock: rng.range(3, 40),
        })
        .collect();
    Shop { items, orders: vec![] }
}

/// Runs one call on the simulated shop: the tool-call text and the tool output text.
fn step(shop: &mut Shop, op: &str, args: Value) -> (String, String, bool) {
    let call = tool_call(op, &args);
    let mut a: Map<String, Value> = args.as_object().cloned().unwrap_or_default();
    if let Some(Value::String(s)) = a.get("order_id") {
        a.insert("order_id".into(), json!(s.parse::<i64>().unwrap_or(-1)));
    }
    let r = shop.handle(op, &a);
    let out = arl_env::tools::openapi::output(r.status, &r.body.to_string());
    (call, out.text, out.error)
}

pub fn generate(rng: &mut Rng, level: u32) -> Task {
    let level = level.clamp(1, MAX_LEVEL);
    let mut shop = setup(rng, level);
    let pool = if level <= 2 { 2 } else { 4 };
    let kind = rng.below(pool);
    let it = shop.items[rng.below(shop.items.len() as u64) as usize].clone();
    // Pre-existing orders for the cancel task (two of the item, one of another).
    if kind == 2 {
        let other = shop.items.iter().find(|i| i.sku != it.sku).cloned().expect("at least two items");
        for (id, (sku, q)) in (1..).zip([(&it.sku, 2), (&other.sku, 1), (&it.sku, 1)]) {
            shop.orders.push(Order { order_id: id, sku: sku.clone(), quantity: q, status: "placed".into() });
            if let Some(x) = shop.items.iter_mut().find(|x| &x.sku == sku) {
                x.stock -= q.min(x.stock);
            }
        }
    }
    let initial = shop.clone();
    let mut calls: Vec<(String, String)> = Vec::new();
    let mut run = |shop: &mut Shop, op: &str, args: Value| {
        let (c, o, _) = step(shop, op, args);
        calls.push((c, o));
    };
    let (goal_text, goal) = match kind {
        0 => {
            let q = rng.range(1, it.stock.min(5));
            run(&mut shop, "list_items", json!({}));
            run(&mut shop, "create_order", json!({"sku": it.sku, "quantity": q}));
            (format!("Order {q} units of the {}.", it.name), json!({"placed": [{"sku": it.sku, "quantity": q}]}))
        }
        1 => {
            let cat = it.category.clone();
            let cheapest = shop
                .items
                .iter()
                .filter(|i| i.category == cat)
                .min_by_key(|i| (i.price, i.sku.clone()))
                .cloned()
                .expect("the item's category");
            let q = rng.range(1, cheapest.stock.min(4));
            run(&mut shop, "list_items", json!({"category": cat}));
            run(&mut shop, "create_order", json!({"sku": cheapest.sku, "quantity": q}));
            (
                format!("Order {q} units of the cheapest item in the '{cat}' category (if several are cheapest, the one with the smallest SKU)."),
                json!({"placed": [{"sku": cheapest.sku, "quantity": q}]}),
            )
        }
        2 => {
            run(&mut shop, "list_orders", json!({}));
            let ids: Vec<i64> =
                shop.orders.iter().filter(|o| o.sku == it.sku && o.status == "placed").map(|o| o.order_id).collect();
            for id in ids {
                run(&mut shop, "cancel_order", json!({"order_id": id}));
            }
            let keep: Vec<Value> = shop
                .orders
                .iter()
                .filter(|o| o.status == "placed")
                .map(|o| json!({"sku": o.sku, "quantity": o.quantity}))
                .collect();
            (
                format!("Cancel every placed order of the {} and leave the other orders alone.", it.name),
                json!({"placed": keep}),
            )
        }
        _ => {
            let target = it.stock + rng.range(5, 60);
            run(&mut shop, "get_item", json!({"sku": it.sku}));
            run(&mut shop, "restock_item", json!({"sku": it.sku, "quantity": target - it.stock}));
            (
                format!("Restock the {} so that exactly {target} units are in stock. Place no orders.", it.name),
                json!({"placed": [], "stock": {it.sku.clone(): target}}),
            )
        }
    };
    let prompt = format!("You operate a shop through its API tools. {goal_text} When you are done, say `Done.`");
    let mut meta = Map::new();
    meta.insert("api_setup".into(), json!(initial));
    meta.insert("kind".into(), json!(["order", "cheapest", "cancel", "restock"][kind as usize]));
    let spec = arl_env::shop::openapi("http://127.0.0.1");
    let tools = arl_env::tools::openapi::OpenApi::from_spec(&spec, None)
        .map(|a| a.ops.into_iter().map(|o| o.definition).collect())
        .unwrap_or_default();
    Task::tool_walk(prompt, goal, &calls, "Done.", meta, tools)
}
