//! Credentials out of everything printed: a node URL shown in an error, a
//! `Debug` or an accessor has `***` where its password was.

/// `url` with its password replaced by `***`: the part of the userinfo
/// after the first `:` (`redis://user:secret@host` → `redis://user:***@host`)
/// and the value of a `pass` or `password` query parameter
/// (`redis+unix:///sock?pass=secret` → `redis+unix:///sock?pass=***`).
///
/// Works on any string, parseable or not: URLs the parser refused are shown
/// through it too. The userinfo ends at the last `@` before the query, so a
/// password holding an unescaped `/` or `@` is still covered.
pub(crate) fn redact_url(url: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((head, query)) => (head, Some(query)),
        None => (url, None),
    };
    let authority = head.find("://").map_or(0, |i| i + 3);
    let mut shown = match head[authority..].rfind('@') {
        Some(at) => {
            let userinfo = &head[authority..authority + at];
            let user = userinfo.split_once(':').map(|(user, _)| user);
            let rest = &head[authority + at..];
            match user {
                Some(user) => format!("{}{user}:***{rest}", &head[..authority]),
                None => head.to_owned(),
            }
        }
        None => head.to_owned(),
    };
    if let Some(query) = query {
        shown.push('?');
        let params: Vec<String> = query
            .split('&')
            .map(|param| match param.split_once('=') {
                Some((name, _))
                    if name.eq_ignore_ascii_case("pass")
                        || name.eq_ignore_ascii_case("password") =>
                {
                    format!("{name}=***")
                }
                _ => param.to_owned(),
            })
            .collect();
        shown.push_str(&params.join("&"));
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_replaced_wherever_a_url_can_carry_one() {
        for (url, shown) in [
            ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
            ("redis://:s3cret@h:1/2", "redis://:***@h:1/2"),
            ("redis://app:s3cret@h:1", "redis://app:***@h:1"),
            ("rediss://app:s3/c@r@t@h:1", "rediss://app:***@h:1"),
            ("redis://app@h:1", "redis://app@h:1"),
            (
                "redis+unix:///tmp/r.sock?db=1&pass=s3cret",
                "redis+unix:///tmp/r.sock?db=1&pass=***",
            ),
            (
                "unix:///r.sock?PASSWORD=s3cret",
                "unix:///r.sock?PASSWORD=***",
            ),
            ("not a url :s3cret@", "not a url :***@"),
            ("", ""),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }
}
