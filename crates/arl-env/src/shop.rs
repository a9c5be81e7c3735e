//! The shop: a small stateful inventory-and-orders API that `arl-env` serves
//! over HTTP (with its OpenAPI 3 spec) and `arl-tasks api` sets goals in.
//! One [`Shop`] per episode; every operation is a pure function of the
//! state and the arguments, so the task generator can compute what the
//! service will answer (the demonstrations' tool turns).
//!
//! Operations (`operationId`: method path):
//! - `list_items`: GET /items (`category` optional)
//! - `get_item`: GET /items/{sku}
//! - `restock_item`: POST /items/{sku}/restock `{quantity}`
//! - `create_order`: POST /orders `{sku, quantity}` (takes stock; 409 when short)
//! - `list_orders`: GET /orders
//! - `cancel_order`: POST /orders/{order_id}/cancel (returns the stock)
//!
//! Episodes (not tools; `x-arl-internal`): POST /episodes `{setup}` →
//! `{episode_id}`; GET /episodes/{id} → the state; DELETE /episodes/{id}.
//! The tool operations name their episode in the `X-Episode-Id` header.
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// The header that names the episode.
pub const EPISODE_HEADER: &str = "X-Episode-Id";
/// Largest quantity one call may order or restock.
pub const MAX_QUANTITY: i64 = 1000;
/// Most items and orders one episode may hold.
pub const MAX_ITEMS: usize = 200;
pub const MAX_ORDERS: usize = 500;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Item {
    pub sku: String,
    pub name: String,
    pub category: String,
    pub price: i64,
    pub stock: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Order {
    pub order_id: i64,
    pub sku: String,
    pub quantity: i64,
    pub status: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Shop {
    pub items: Vec<Item>,
    #[serde(default)]
    pub orders: Vec<Order>,
}

/// An HTTP answer: status and JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
}

fn ok(body: Value) -> Reply {
    Reply { status: 200, body }
}

fn fail(status: u16, msg: impl Into<String>) -> Reply {
    Reply { status, body: json!({"error": msg.into()}) }
}

/// Route a method and path to an operation id and its path parameters.
pub fn route(method: &str, path: &str) -> Option<(&'static str, Map<String, Value>)> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let mut p = Map::new();
    let op = match (method, segs.as_slice()) {
        ("GET", ["items"]) => "list_items",
        ("GET", ["items", sku]) => {
            p.insert("sku".into(), json!(sku));
            "get_item"
        }
        ("POST", ["items", sku, "restock"]) => {
            p.insert("sku".into(), json!(sku));
            "restock_item"
        }
        ("POST", ["orders"]) => "create_order",
        ("GET", ["orders"]) => "list_orders",
        ("POST", ["orders", id, "cancel"]) => {
            p.insert("order_id".into(), id.parse::<i64>().map(Value::from).unwrap_or_else(|_| json!(id)));
            "cancel_order"
        }
        _ => return None,
    };
    Some((op, p))
}

fn int_arg(args: &Map<String, Value>, k: &str) -> Result<i64, Reply> {
    match args.get(k) {
        Some(Value::Number(n)) => n.as_i64().ok_or_else(|| fail(422, format!("`{k}` must be an integer"))),
        Some(Value::String(s)) => s.trim().parse().map_err(|_| fail(422, format!("`{k}` must be an integer"))),
        Some(_) => Err(fail(422, format!("`{k}` must be an integer"))),
        None => Err(fail(422, format!("missing `{k}`"))),
    }
}

fn str_arg<'a>(args: &'a Map<String, Value>, k: &str) -> Result<&'a str, Reply> {
    match args.get(k) {
        Some(Value::String(s)) if s.len() <= 200 => Ok(s),
        Some(Value::String(_)) => Err(fail(422, format!("`{k}` is too long"))),
        Some(_) => Err(fail(422, format!("`{k}` must be a string"))),
        None => Err(fail(422, format!("missing `{k}`"))),
    }
}

fn quantity(args: &Map<String, Value>) -> Result<i64, Reply> {
    let q = int_arg(args, "quantity")?;
    if !(1..=MAX_QUANTITY).contains(&q) {
        return Err(fail(422, format!("`quantity` must be between 1 and {MAX_QUANTITY}")));
    }
    Ok(q)
}

impl Shop {
    /// The initial state of an episode (`metadata.api_setup`).
    pub fn from_setup(v: &Value) -> Result<Shop, String> {
        let s: Shop = serde_json::from_value(v.clone()).map_err(|e| format!("invalid setup: {e}"))?;
        if s.items.len() > MAX_ITEMS || s.orders.len() > MAX_ORDERS {
            return Err(format!("setup too large (at most {MAX_ITEMS} items, {MAX_ORDERS} orders)"));
        }
        Ok(s)
    }

    fn item_mut(&mut self, sku: &str) -> Result<&mut Item, Reply> {
        self.items.iter_mut().find(|i| i.sku == sku).ok_or_else(|| fail(404, format!("no item with sku `{sku}`")))
    }

    /// Runs one operation; `args` holds path, query and body arguments together.
    pub fn handle(&mut self, op: &str, args: &Map<String, Value>) -> Reply {
        match self.handle_inner(op, args) {
            Ok(r) | Err(r) => r,
        }
    }

    fn handle_inner(&mut self, op: &str, args: &Map<String, Value>) -> Result<Reply, Reply> {
        Ok(match op {
            "list_items" => {
                let cat = match args.get("category") {
                    None | Some(Value::Null) => None,
                    Some(_) => Some(str_arg(args, "category")?),
                };
                let items: Vec<&Item> = self.items.iter().filter(|i| cat.is_none_or(|c| i.category == c)).collect();
                ok(json!(items))
            }
            "get_item" => {
                let sku = str_arg(args, "sku")?.to_string();
                ok(json!(self.item_mut(&sku)?))
            }
            "restock_item" => {
                let sku = str_arg(args, "sku")?.to_string();
                let q = quantity(args)?;
                let it = self.item_mut(&sku)?;
                it.stock += q;
                ok(json!(it))
            }
            "create_order" => {
                let sku = str_arg(args, "sku")?.to_string();
                let q = quantity(args)?;
                if self.orders.len() >= MAX_ORDERS {
                    return Err(fail(429, format!("at most {MAX_ORDERS} orders per episode")));
                }
                let it = self.item_mut(&sku)?;
                if it.stock < q {
                    let have = it.stock;
                    return Err(fail(409, format!("only {have} of `{sku}` in stock")));
                }
                it.stock -= q;
                let id = self.orders.iter().map(|o| o.order_id).max().unwrap_or(0) + 1;
                let o = Order { order_id: id, sku, quantity: q, status: "placed".into() };
                self.orders.push(o.clone());
                ok(json!(o))
            }
            "list_orders" => ok(json!(self.orders)),
            "cancel_order" => {
                let id = int_arg(args, "order_id")?;
                let Some(i) = self.orders.iter().position(|o| o.order_id == id) else {
                    return Err(fail(404, format!("no order {id}")));
                };
                if self.orders[i].status != "placed" {
                    return Err(fail(409, format!("order {id} is already {}", self.orders[i].status)));
                }
                self.orders[i].status = "cancelled".into();
                let (sku, q) = (self.orders[i].sku.clone(), self.orders[i].quantity);
                if let Ok(it) = self.item_mut(&sku) {
                    it.stock += q;
                }
                ok(json!(self.orders[i]))
            }
            other => return Err(fail(404, format!("no operation `{other}`"))),
        })
    }

    /// Placed orders as (sku, quantity), sorted.
    pub fn placed(&self) -> Vec<(String, i64)> {
        let mut v: Vec<(String, i64)> =
            self.orders.iter().filter(|o| o.status == "placed").map(|o| (o.sku.clone(), o.quantity)).collect();
        v.sort();
        v
    }
}

/// Checks a final state against a goal (`label`): `{"placed": [{"sku",
/// "quantity"}…]}` is the exact multiset of placed orders, `{"stock": {SKU:
/// N}}` exact stock levels. `None` when met, else the first unmet part.
pub fn check_goal(state: &Shop, goal: &Value) -> Result<Option<String>, String> {
    let goal = goal.as_object().ok_or("the goal must be an object with `placed` and/or `stock`")?;
    if goal.get("placed").is_none() && goal.get("stock").is_none() {
        return Err("the goal has neither `placed` nor `stock`".into());
    }
    if let Some(p) = goal.get("placed") {
        let arr = p.as_array().ok_or("`placed` must be a list")?;
        let mut want: Vec<(String, i64)> = arr
            .iter()
            .map(|o| {
                let sku = o.get("sku").and_then(Value::as_str).ok_or("`placed[].sku` must be a string")?;
                let q = o.get("quantity").and_then(Value::as_i64).ok_or("`placed[].quantity` must be an integer")?;
                Ok((sku.to_string(), q))
            })
            .collect::<Result<_, String>>()?;
        want.sort();
        let mut got = state.placed();
        if got != want {
            for w in &want {
                if let Some(i) = got.iter().position(|g| g == w) {
                    got.remove(i);
                } else {
                    return Ok(Some(format!("expected a placed order of {} × {}, not found", w.1, w.0)));
                }
            }
            if let Some(g) = got.first() {
                return Ok(Some(format!("unexpected placed order of {} × {}", g.1, g.0)));
            }
        }
    }
    if let Some(s) = goal.get("stock") {
        let m = s.as_object().ok_or("`stock` must be an object SKU → count")?;
        for (sku, n) in m {
            let n = n.as_i64().ok_or("`stock` counts must be integers")?;
            let have = state.items.iter().find(|i| &i.sku == sku).map(|i| i.stock);
            match have {
                Some(h) if h == n => {}
                Some(h) => return Ok(Some(format!("stock of {sku} is {h}, the goal is {n}"))),
                None => return Ok(Some(format!("no item {sku}"))),
            }
        }
    }
    Ok(None)
}

/// The OpenAPI 3 spec of the tool operations (and the internal episode ones).
pub fn openapi(server_url: &str) -> Value {
    let item = json!({"$ref": "#/components/schemas/Item"});
    let order = json!({"$ref": "#/components/schemas/Order"});
    let err = json!({"description": "error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}});
    let sku = json!({"name": "sku", "in": "path", "required": true, "description": "The item's SKU", "schema": {"type": "string"}});
    let qty = json!({"type": "integer", "minimum": 1, "maximum": MAX_QUANTITY});
    let ok = |schema: Value| json!({"description": "OK", "content": {"application/json": {"schema": schema}}});
    json!({
        "openapi": "3.0.3",
        "info": {"title": "arl shop", "version": "1", "description": "An inventory with orders. Every operation acts on the episode named by the X-Episode-Id header."},
        "servers": [{"url": server_url}],
        "x-arl-episodes": {"create": "/episodes", "state": "/episodes/{episode_id}", "header": EPISODE_HEADER},
        "paths": {
            "/items": {"get": {
                "operationId": "list_items", "summary": "List the items (SKU, name, category, price, stock), optionally of one category.",
                "parameters": [{"name": "category", "in": "query", "required": false, "description": "Only items of this category", "schema": {"type": "string"}}],
                "responses": {"200": ok(json!({"type": "array", "items": item})), "422": err}}},
            "/items/{sku}": {"get": {
                "operationId": "get_item", "summary": "Get one item by SKU.",
                "parameters": [sku],
                "responses": {"200": ok(item.clone()), "404": err}}},
            "/items/{sku}/restock": {"post": {
                "operationId": "restock_item", "summary": "Add units to an item's stock.",
                "parameters": [sku],
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "required": ["quantity"], "properties": {"quantity": qty.clone()}}}}},
                "responses": {"200": ok(item.clone()), "404": err, "422": err}}},
            "/orders": {
                "get": {"operationId": "list_orders", "summary": "List every order (placed and cancelled).", "responses": {"200": ok(json!({"type": "array", "items": order}))}},
                "post": {"operationId": "create_order", "summary": "Order units of an item; they are taken from its stock.",
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "required": ["sku", "quantity"],
                        "properties": {"sku": {"type": "string", "description": "The item's SKU"}, "quantity": qty}}}}},
                    "responses": {"200": ok(order.clone()), "404": err, "409": err, "422": err}}},
            "/orders/{order_id}/cancel": {"post": {
                "operationId": "cancel_order", "summary": "Cancel a placed order; its units go back to stock.",
                "parameters": [{"name": "order_id", "in": "path", "required": true, "schema": {"type": "integer"}}],
                "responses": {"200": ok(order.clone()), "404": err, "409": err}}},
            "/episodes": {"post": {
                "operationId": "create_episode", "x-arl-internal": true, "summary": "Start an episode from a setup; returns its id.",
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "properties": {"setup": {"type": "object"}}}}}},
                "responses": {"200": ok(json!({"type": "object", "properties": {"episode_id": {"type": "string"}}}))}}},
            "/episodes/{episode_id}": {
                "get": {"operationId": "get_episode", "x-arl-internal": true, "summary": "The episode's state.",
                    "parameters": [{"name": "episode_id", "in": "path", "required": true, "schema": {"type": "string"}}],
                    "responses": {"200": ok(json!({"type": "object"})), "404": err}},
                "delete": {"operationId": "delete_episode", "x-arl-internal": true, "summary": "Forget the episode.",
                    "parameters": [{"name": "episode_id", "in": "path", "required": true, "schema": {"type": "string"}}],
                    "responses": {"200": ok(json!({"type": "object"})), "404": err}}}
        },
        "components": {"schemas": {
            "Item": {"type": "object", "properties": {"sku": {"type": "string"}, "name": {"type": "string"}, "category": {"type": "string"}, "price": {"type": "integer"}, "stock": {"type": "integer"}}},
            "Order": {"type": "object", "properties": {"order_id": {"type": "integer"}, "sku": {"type": "string"}, "quantity": {"type": "integer"}, "status": {"type": "string", "enum": ["placed", "cancelled"]}}},
            "Error": {"type": "object", "properties": {"error": {"type": "string"}}}
        }}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shop() -> Shop {
        Shop::from_setup(&json!({"items": [{"sku": "A", "name": "lamp", "category": "home", "price": 5, "stock": 3}]}))
            .unwrap()
    }

    #[test]
    fn orders_take_stock_and_cancels_return_it() {
        let mut s = shop();
        let a = |v: Value| v.as_object().unwrap().clone();
        assert_eq!(s.handle("create_order", &a(json!({"sku": "A", "quantity": 4}))).status, 409);
        let r = s.handle("create_order", &a(json!({"sku": "A", "quantity": 2})));
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(s.items[0].stock, 1);
        assert_eq!(s.handle("create_order", &a(json!({"sku": "A", "quantity": 0}))).status, 422);
        assert_eq!(s.handle("create_order", &a(json!({"sku": "B", "quantity": 1}))).status, 404);
        assert_eq!(s.handle("cancel_order", &a(json!({"order_id": 1}))).status, 200);
        assert_eq!(s.handle("cancel_order", &a(json!({"order_id": 1}))).status, 409);
        assert_eq!(s.items[0].stock, 3);
        assert_eq!(check_goal(&s, &json!({"placed": []})).unwrap(), None);
        assert!(check_goal(&s, &json!({"placed": [{"sku": "A", "quantity": 2}]}))
            .unwrap()
            .unwrap()
            .contains("not found"));
        assert!(check_goal(&s, &json!({"stock": {"A": 4}})).unwrap().unwrap().contains("is 3"));
    }

    #[test]
    fn routes() {
        assert_eq!(route("POST", "/orders/7/cancel").unwrap().1["order_id"], 7);
        assert_eq!(route("GET", "/items/X-1").unwrap().0, "get_item");
        assert!(route("DELETE", "/items").is_none());
    }
}
