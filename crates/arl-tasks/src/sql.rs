//! `sql`: text-to-SQL questions over a small shop database generated per task
//! (customers, products, orders), seeded. The prompt shows the schema; the
//! data is in `metadata.sql_setup` (the script the `sql` tool and reward build
//! each episode's database from); the label holds the gold query
//! (`{"gold": …}`). Gold queries use the SQL that SQLite and PostgreSQL
//! share, so one task set runs on both.
//!
//! With solutions, the demonstration calls the `sql` tool with the gold query,
//! sees its rows (computed here on SQLite), and answers with the query in a
//! ```sql block, which is what the `sql` reward reads.
use super::{tool_call, Task, MAX_LEVEL};
use arl_core::rng::Rng;
use arl_env::sql::{Backend, Db, Limits, TaskDb};
use serde_json::json;

const FIRST: &[&str] = &[
    "Ann", "Ben", "Cara", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jon", "Kim", "Lea", "Max", "Nia", "Omar", "Pia",
];
const LAST: &[&str] = &["Berg", "Chen", "Diaz", "Eke", "Fox", "Gray", "Holm", "Ito", "Jung", "Kahn", "Lund", "Moss"];
const CITIES: &[&str] = &["Oslo", "Lima", "Pune", "Kyiv", "Nice", "Cork"];
const CATEGORIES: &[&str] = &["books", "games", "tools", "garden", "music"];
const NOUNS: &[&str] = &[
    "lamp", "kettle", "chess", "atlas", "rake", "drum", "saw", "novel", "puzzle", "hose", "flute", "map", "vase",
    "drill",
];
const ADJ: &[&str] = &["red", "tiny", "smart", "old", "blue", "grand", "quiet", "swift"];
const YEARS: [i64; 4] = [2021, 2022, 2023, 2024];

pub const SCHEMA: &str = "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL, joined INTEGER NOT NULL);
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT NOT NULL, price INTEGER NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id), product_id INTEGER NOT NULL REFERENCES products(id), quantity INTEGER NOT NULL, year INTEGER NOT NULL);";

struct Data {
    customers: Vec<(i64, String, &'static str, i64)>,
    products: Vec<(i64, String, &'static str, i64)>,
    orders: Vec<(i64, i64, i64, i64, i64)>,
}

fn data(rng: &mut Rng, level: u32) -> Data {
    let nc = 6 + 2 * level as usize;
    let np = 5 + level as usize;
    let no = 12 + 5 * level as usize;
    let mut customers = Vec::new();
    while customers.len() < nc {
        let name = format!("{} {}", rng.choose(FIRST), rng.choose(LAST));
        if customers.iter().any(|c: &(i64, String, &str, i64)| c.1 == name) {
            continue;
        }
        let id = customers.len() as i64 + 1;
        customers.push((id, name, *rng.choose(CITIES), rng.range(2015, 2024)));
    }
    let mut products = Vec::new();
    while products.len() < np {
        let name = format!("{} {}", rng.choose(ADJ), rng.choose(NOUNS));
        if products.iter().any(|p: &(i64, String, &str, i64)| p.1 == name) {
            continue;
        }
        let id = products.len() as i64 + 1;
        products.push((id, name, *rng.choose(CATEGORIES), rng.range(3, 120)));
    }
    // Some customers never order (for the anti-join questions).
    let buyers = (nc * 3 / 4).max(1) as u64;
    let orders = (0..no)
        .map(|i| {
            (
                i as i64 + 1,
                rng.below(buyers) as i64 + 1,
                rng.below(np as u64) as i64 + 1,
                rng.range(1, 9),
                *rng.choose(&YEARS),
            )
        })
        .collect();
    Data { customers, products, orders }
}

fn setup(d: &Data) -> String {
    let q = |s: &str| format!("'{}'", s.replace('\'', "''"));
    let mut s = String::from(SCHEMA);
    s.push('\n');
    let rows: Vec<String> = d.customers.iter().map(|(i, n, c, j)| format!("({i}, {}, {}, {j})", q(n), q(c))).collect();
    s.push_str(&format!("INSERT INTO customers (id, name, city, joined) VALUES {};\n", rows.join(", ")));
    let rows: Vec<String> = d.products.iter().map(|(i, n, c, p)| format!("({i}, {}, {}, {p})", q(n), q(c))).collect();
    s.push_str(&format!("INSERT INTO products (id, name, category, price) VALUES {};\n", rows.join(", ")));
    let rows: Vec<String> = d.orders.iter().map(|(i, c, p, n, y)| format!("({i}, {c}, {p}, {n}, {y})")).collect();
    s.push_str(&format!(
        "INSERT INTO orders (id, customer_id, product_id, quantity, year) VALUES {};\n",
        rows.join(", ")
    ));
    s
}

/// A question and its gold query, for a level.
fn question(rng: &mut Rng, level: u32, d: &Data) -> (String, String, &'static str) {
    let city = d.customers[rng.below(d.customers.len() as u64) as usize].2;
    let cat = d.products[rng.below(d.products.len() as u64) as usize].2;
    let prod = d.products[rng.below(d.products.len() as u64) as usize].1.clone();
    let year = *rng.choose(&YEARS);
    let pool: u64 = match level {
        1 => 2,
        2 => 4,
        3..=4 => 6,
        5..=6 => 8,
        _ => 10,
    };
    match rng.below(pool) {
        0 => (format!("How many customers live in {city}?"), format!("SELECT COUNT(*) FROM customers WHERE city = '{city}'"), "count"),
        1 => (
            format!("List the names of the products in the category '{cat}'."),
            format!("SELECT name FROM products WHERE category = '{cat}'"),
            "filter",
        ),
        2 => (
            format!("List the names and prices of the products in the category '{cat}', most expensive first (ties by name)."),
            format!("SELECT name, price FROM products WHERE category = '{cat}' ORDER BY price DESC, name"),
            "order",
        ),
        3 => ("How many customers live in each city? Give the city and the count.".into(), "SELECT city, COUNT(*) FROM customers GROUP BY city".into(), "group"),
        4 => (
            format!("What is the total quantity ordered of the product '{prod}' (0 if none)?"),
            format!("SELECT COALESCE(SUM(o.quantity), 0) FROM orders o JOIN products p ON p.id = o.product_id WHERE p.name = '{prod}'"),
            "join",
        ),
        5 => (
            format!("Which customers placed at least one order in {year}? Give their names, each once."),
            format!("SELECT DISTINCT c.name FROM customers c JOIN orders o ON o.customer_id = c.id WHERE o.year = {year}"),
            "join",
        ),
        6 => (
            "Which customers have never placed an order? Give their names.".into(),
            "SELECT name FROM customers WHERE id NOT IN (SELECT customer_id FROM orders)".into(),
            "subquery",
        ),
        7 => (
            format!("What is the average price of the products in the category '{cat}'?"),
            format!("SELECT AVG(price) FROM products WHERE category = '{cat}'"),
            "aggregate",
        ),
        8 => (
            "What is the revenue (quantity times price) of each product category? Give the category and the revenue, highest revenue first (ties by category).".into(),
            "SELECT p.category, SUM(o.quantity * p.price) AS revenue FROM orders o JOIN products p ON p.id = o.product_id GROUP BY p.category ORDER BY revenue DESC, p.category".into(),
            "group",
        ),
        _ => (
            "Which three customers ordered the largest total quantity? Give the name and the total, largest first (ties by name).".into(),
            "SELECT c.name, SUM(o.quantity) AS total FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.name ORDER BY total DESC, c.name LIMIT 3".into(),
            "top",
        ),
    }
}

pub fn generate(rng: &mut Rng, level: u32) -> Task {
    let level = level.clamp(1, MAX_LEVEL);
    let d = data(rng, level);
    let setup = setup(&d);
    let (q, gold, kind) = question(rng, level, &d);
    let prompt = format!(
        "You have an SQL database with these tables:\n{SCHEMA}\n\nQuestion: {q}\n\nUse the `sql` tool to run queries if you like, then answer with one SQL query that returns exactly the answer, in a ```sql code block."
    );
    let response = format!("```sql\n{gold}\n```");
    // The demonstration's tool turn shows what the tool would return.
    let task_db = TaskDb { setup: setup.clone(), writable: false };
    let rows = Db::open(&Backend::Sqlite, &task_db, Limits::default())
        .and_then(|mut db| db.query(&gold))
        .map(|t| t.render())
        .unwrap_or_else(|e| format!("Error: {e}"));
    let messages = json!([
        {"role": "user", "content": prompt},
        {"role": "assistant", "content": tool_call("sql", &json!({"query": gold}))},
        {"role": "tool", "name": "sql", "content": rows},
        {"role": "assistant", "content": response},
    ]);
    let mut meta = serde_json::Map::new();
    meta.insert("sql_setup".into(), json!(setup));
    meta.insert("kind".into(), json!(kind));
    Task {
        prompt,
        label: json!({"gold": gold}),
        response,
        messages: Some(messages),
        metadata: meta,
        tools: vec![arl_env::tools::sql_def(Limits::default().max_rows)],
    }
}
