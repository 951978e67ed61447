//! The table of settings in docs/api.md, generated from the doc comments of the settings in
//! `config.rs`, with each key's environment variable and default. A test fails when the table
//! drifts from the code; `UPDATE_DOCS=1 cargo test -p seckill settings_doc` rewrites it.

use crate::config::{Settings, env_name};

/// The sections of [`Settings`]: the struct that holds each, by field name.
const SECTIONS: [(&str, &str); 5] = [("locks", "Locks"), ("owner", "Owner"), ("batch", "Batch"), ("pools", "Pools"), ("gate", "Gate")];

/// One setting: its key (`batch.linger_ms`) and its doc comment, joined into one line.
#[derive(Debug, PartialEq)]
struct Documented {
    key: String,
    doc: String,
}

/// The fields of `struct name` in `source`, in order, with their keys (serde's rename if any).
fn fields(source: &str, name: &str) -> Vec<Documented> {
    let start = source.find(&format!("pub struct {name} {{")).unwrap_or_else(|| panic!("no struct {name}"));
    let body = &source[start..];
    let body = &body[..body.find("\n}").expect("the struct ends")];
    let (mut out, mut doc, mut rename) = (Vec::new(), Vec::new(), None);
    for line in body.lines().skip(1).map(str::trim) {
        if let Some(text) = line.strip_prefix("///") {
            doc.push(text.trim().to_owned());
        } else if line.starts_with("#[serde(") {
            rename = line.split("rename = \"").nth(1).and_then(|r| r.split('"').next()).map(str::to_owned);
        } else if let Some(field) = line.strip_prefix("pub ") {
            let field = field.split(':').next().expect("a field has a name").to_owned();
            out.push(Documented { key: rename.take().unwrap_or(field), doc: doc.join(" ") });
            doc.clear();
        }
    }
    out
}

/// Every setting with a dotted key, sections expanded in place.
fn settings(source: &str) -> Vec<Documented> {
    fields(source, "Settings")
        .into_iter()
        .flat_map(|top| match SECTIONS.iter().find(|(field, _)| *field == top.key) {
            Some((field, section)) => {
                fields(source, section).into_iter().map(|f| Documented { key: format!("{field}.{}", f.key), doc: f.doc }).collect()
            }
            None => vec![top],
        })
        .collect()
}

/// The default of `key` as the table shows it.
fn default_of(defaults: &serde_json::Value, key: &str) -> String {
    let value = key.split('.').fold(defaults, |v, k| &v[k]);
    match value {
        serde_json::Value::String(s) if s.is_empty() => "(empty)".to_owned(),
        serde_json::Value::String(s) => format!("`{s}`"),
        serde_json::Value::Null => "(unset)".to_owned(),
        other => format!("`{other}`"),
    }
}

/// The markdown table of every setting.
pub(crate) fn table(source: &str) -> String {
    let defaults = serde_json::to_value(Settings::default()).expect("settings serialize");
    let mut out = String::from("| key | environment variable | default | what it is |\n|---|---|---|---|\n");
    for s in settings(source) {
        let also = match s.key.as_str() {
            "redis_url" => " or `REDIS_URL`",
            "database_url" => " or `DATABASE_URL`",
            _ => "",
        };
        out.push_str(&format!("| `{}` | `{}`{also} | {} | {} |\n", s.key, env_name(&s.key), default_of(&defaults, &s.key), s.doc));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = include_str!("config.rs");
    const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/api.md");
    const BEGIN: &str = "<!-- generated: settings (from services/seckill/src/config.rs; do not edit) -->\n";
    const END: &str = "<!-- end: settings -->";

    #[test]
    fn keys_come_from_serde_and_sections_expand() {
        let all = settings(SOURCE);
        let keys: Vec<&str> = all.iter().map(|s| s.key.as_str()).collect();
        assert!(keys.contains(&"request_deadline_ms") && keys.contains(&"batch.linger_ms") && keys.contains(&"pools.critical"));
        assert!(!keys.contains(&"locks"), "a section is expanded, not listed");
        assert!(all.iter().all(|s| !s.doc.is_empty()), "every setting is documented");
    }

    #[test]
    fn the_settings_table_in_the_docs_is_the_one_the_code_makes() {
        let doc = std::fs::read_to_string(DOC).unwrap();
        let (before, rest) = doc.split_once(BEGIN).expect("docs/api.md has the settings markers");
        let (current, after) = rest.split_once(END).expect("the settings block ends");
        let wanted = table(SOURCE);
        if std::env::var_os("UPDATE_DOCS").is_some() {
            std::fs::write(DOC, format!("{before}{BEGIN}{wanted}{END}{after}")).unwrap();
            return;
        }
        assert!(current == wanted, "docs/api.md's settings table is out of date: run UPDATE_DOCS=1 cargo test -p seckill settings_doc");
    }
}
