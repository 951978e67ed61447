//! Lock-name patterns in Redis `SCAN MATCH` syntax (`*`, `?`, `[abc]`, `[a-z]`, `[^a]`, `\x`): the
//! syntax [`LockClient::inspect`](crate::LockClient::inspect) takes on every backend. Redis
//! matches them itself; the other backends list names and match them here.

/// Whether `name` matches `pattern`. Iterative, with one backtrack point for the latest `*`: linear
/// in practice, never exponential.
pub(crate) fn matches(pattern: &str, name: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        let step = match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
                continue;
            }
            Some('?') => Some(1),
            Some('[') => class(&p[pi..], t[ti]),
            Some('\\') if pi + 1 < p.len() => (p[pi + 1] == t[ti]).then_some(2),
            Some(&c) => (c == t[ti]).then_some(1),
            None => None,
        };
        match step {
            Some(width) => {
                pi += width;
                ti += 1;
            }
            None => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Matches `c` against the class at the start of `p` (`[...]`); the class's width if it matches.
/// An unclosed class ends with the pattern, as in Redis.
fn class(p: &[char], c: char) -> Option<usize> {
    let mut i = 1;
    let negated = matches!(p.get(i), Some('^' | '!'));
    if negated {
        i += 1;
    }
    let mut matched = false;
    while i < p.len() && p[i] != ']' {
        if p[i] == '\\' && i + 1 < p.len() {
            matched |= p[i + 1] == c;
            i += 2;
        } else if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
            let (lo, hi) = if p[i] <= p[i + 2] { (p[i], p[i + 2]) } else { (p[i + 2], p[i]) };
            matched |= (lo..=hi).contains(&c);
            i += 3;
        } else {
            matched |= p[i] == c;
            i += 1;
        }
    }
    (matched != negated).then_some((i + 1).min(p.len()))
}

/// The part of `pattern` before its first wildcard, unescaped: every matching name starts with it
/// (a backend lists only names with this prefix).
#[cfg_attr(not(any(feature = "etcd", feature = "postgres")), allow(dead_code))]
pub(crate) fn literal_prefix(pattern: &str) -> String {
    let mut out = String::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '*' | '?' | '[' => break,
            '\\' => match chars.next() {
                Some(escaped) => out.push(escaped),
                None => break,
            },
            c => out.push(c),
        }
    }
    out
}

/// Whether `pattern` has wildcards or escapes (otherwise it names exactly one lock).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn is_pattern(pattern: &str) -> bool {
    pattern.contains(['*', '?', '[', '\\'])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_follow_redis_match() {
        for (pattern, name, expected) in [
            ("*", "orders:7", true),
            ("*", "", true),
            ("orders:*", "orders:7", true),
            ("orders:*", "order", false),
            ("orders:?", "orders:17", false),
            ("o?ders", "orders", true),
            ("o*s:1?", "orders:17", true),
            ("a[bc]d", "acd", true),
            ("a[^bc]d", "acd", false),
            ("a[!bc]d", "aed", true),
            ("a[a-c]d", "abd", true),
            ("shard-[0-9]", "shard-7", true),
            ("a\\*", "a*", true),
            ("a\\*", "ab", false),
            ("*x", "abc", false),
            ("x[ab]y*", "xby-1", true),
            ("test:zk:*", "test:zk:ab/cd", true),
        ] {
            assert_eq!(matches(pattern, name), expected, "{pattern} ~ {name}");
        }
    }

    #[test]
    fn the_literal_prefix_ends_at_the_first_wildcard() {
        assert_eq!(literal_prefix("orders:*"), "orders:");
        assert_eq!(literal_prefix("a\\*b*"), "a*b");
        assert_eq!(literal_prefix("*"), "");
        assert_eq!(literal_prefix("plain"), "plain");
    }

    #[test]
    fn exact_names_are_not_patterns() {
        assert!(is_pattern("a*") && is_pattern("a\\b") && !is_pattern("test:name:1"));
    }
}
