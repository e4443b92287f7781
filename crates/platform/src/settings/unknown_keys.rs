//! Settings that name nothing. A typo in a key or a variable (`gateway.listn`,
//! `SECKILL_GATEWAY_LISTEN` with one underscore) would otherwise be ignored in silence and
//! the default used, which an operator finds out at 3 a.m.; instead the service refuses to
//! start, naming the key, where it came from and the closest setting there is.

use std::collections::BTreeMap;

use config::{Value, ValueKind};

/// The prefix of every setting variable; `__` separates a section from its keys.
pub const PREFIX: &str = "SECKILL_";
pub const SEPARATOR: &str = "__";

/// The `SECKILL_` variables that are settings (`SECKILL_<SECTION>__<KEY>`). The others
/// (`SECKILL_ENV`, `SECKILL_CONFIG_DIR`, the scripts' own) are not read as settings.
pub fn setting_variables(vars: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    vars.iter()
        .filter(|(name, _)| is_setting_variable(name))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect()
}

fn is_setting_variable(name: &str) -> bool {
    name.strip_prefix(PREFIX)
        .is_some_and(|rest| rest.contains(SEPARATOR))
}

/// The key a setting variable sets: `SECKILL_RATE_LIMIT__USER_BURST` → `rate_limit.user_burst`.
fn key_of_variable(name: &str) -> String {
    name[PREFIX.len()..]
        .to_lowercase()
        .split(SEPARATOR)
        .collect::<Vec<_>>()
        .join(".")
}

/// The variable that sets `key`: `rate_limit.user_burst` → `SECKILL_RATE_LIMIT__USER_BURST`.
pub fn variable_of_key(key: &str) -> String {
    format!(
        "{PREFIX}{}",
        key.to_uppercase()
            .split('.')
            .collect::<Vec<_>>()
            .join(SEPARATOR)
    )
}

/// Every leaf key of the merged configuration, dotted (`gateway.listen`).
pub fn leaf_keys(merged: &Value) -> Vec<String> {
    let mut keys = Vec::new();
    collect(merged, "", &mut keys);
    keys
}

fn collect(value: &Value, path: &str, keys: &mut Vec<String>) {
    match &value.kind {
        ValueKind::Table(table) => {
            for (name, child) in table {
                let child_path = if path.is_empty() {
                    name.clone()
                } else {
                    format!("{path}.{name}")
                };
                collect(child, &child_path, keys);
            }
        }
        _ if !path.is_empty() => keys.push(path.to_owned()),
        _ => {}
    }
}

/// The first problem found: a key no setting has (`ignored`, as serde left it unread), or a
/// variable that is a setting's name with one underscore where two belong. `known` is every
/// key that was read; `vars` every `SECKILL_` variable of the process.
pub fn first_problem(
    ignored: &[String],
    known: &[String],
    vars: &BTreeMap<String, String>,
) -> Option<String> {
    if let Some(key) = ignored.first() {
        let origin = vars
            .keys()
            .find(|name| is_setting_variable(name) && key_of_variable(name) == *key)
            .map_or_else(
                || "set in a config file".to_owned(),
                |name| format!("set by the variable {name}"),
            );
        let hint = closest(key, known).map_or_else(String::new, |close| {
            format!(
                "; the closest setting is `{close}` ({})",
                variable_of_key(close)
            )
        });
        return Some(format!("unknown setting `{key}` ({origin}){hint}"));
    }
    vars.keys()
        .filter(|name| name.starts_with(PREFIX) && !is_setting_variable(name))
        .find_map(|name| {
            let meant = one_underscore_too_few(name, known)?;
            Some(format!(
                "{name} is not a setting variable; the setting `{meant}` is {}",
                variable_of_key(&meant)
            ))
        })
}

/// The setting a variable names with its section's `__` written `_`, if it is one exactly:
/// `SECKILL_GATEWAY_LISTEN` → `gateway.listen`. Only an exact match counts, so that the
/// scripts' own variables (`SECKILL_CACHE_LIMIT_GB`) are never taken for settings.
fn one_underscore_too_few(name: &str, known: &[String]) -> Option<String> {
    let rest = name[PREFIX.len()..].to_lowercase();
    known.iter().find_map(|key| {
        let (section, field) = key.split_once('.')?;
        (rest == format!("{section}_{}", field.replace('.', "__"))).then(|| key.clone())
    })
}

/// The known key with the fewest edits from `key` (ties: the first in order).
fn closest<'a>(key: &str, known: &'a [String]) -> Option<&'a str> {
    known
        .iter()
        .min_by_key(|candidate| strsim::levenshtein(key, candidate))
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> Vec<String> {
        [
            "gateway.listen",
            "gateway.keep_alive_secs",
            "rate_limit.user_burst",
            "tokens.keys.k1",
        ]
        .map(str::to_owned)
        .to_vec()
    }

    fn vars(names: &[&str]) -> BTreeMap<String, String> {
        names
            .iter()
            .map(|n| ((*n).to_owned(), "1".to_owned()))
            .collect()
    }

    #[test]
    fn a_misspelt_key_from_a_variable_names_the_variable_and_the_closest_setting() {
        let problem = first_problem(
            &["gateway.listn".to_owned()],
            &known(),
            &vars(&["SECKILL_GATEWAY__LISTN"]),
        )
        .unwrap();
        assert_eq!(
            problem,
            "unknown setting `gateway.listn` (set by the variable SECKILL_GATEWAY__LISTN); \
             the closest setting is `gateway.listen` (SECKILL_GATEWAY__LISTEN)"
        );
    }

    #[test]
    fn a_misspelt_key_from_a_file_says_so() {
        let problem =
            first_problem(&["rate_limit.user_brust".to_owned()], &known(), &vars(&[])).unwrap();
        assert!(problem.contains("(set in a config file)"), "{problem}");
        assert!(problem.contains("`rate_limit.user_burst`"), "{problem}");
    }

    #[test]
    fn a_setting_written_with_one_underscore_is_refused() {
        let problem =
            first_problem(&[], &known(), &vars(&["SECKILL_RATE_LIMIT_USER_BURST"])).unwrap();
        assert_eq!(
            problem,
            "SECKILL_RATE_LIMIT_USER_BURST is not a setting variable; the setting \
             `rate_limit.user_burst` is SECKILL_RATE_LIMIT__USER_BURST"
        );
    }

    #[test]
    fn the_loaders_and_the_scripts_own_variables_are_not_settings() {
        let others = vars(&[
            "SECKILL_ENV",
            "SECKILL_CONFIG_DIR",
            "SECKILL_GATEWAY_URL",
            "SECKILL_CACHE_LIMIT_GB",
            "SECKILL_TEST_REDIS_URL",
        ]);
        assert!(setting_variables(&others).is_empty());
        assert_eq!(first_problem(&[], &known(), &others), None);
    }

    #[test]
    fn a_variable_sets_the_key_its_name_spells() {
        assert_eq!(
            key_of_variable("SECKILL_RATE_LIMIT__USER_BURST"),
            "rate_limit.user_burst"
        );
        assert_eq!(
            variable_of_key("tokens.keys.k1"),
            "SECKILL_TOKENS__KEYS__K1"
        );
    }
}
