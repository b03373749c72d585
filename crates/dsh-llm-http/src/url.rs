//! URLs in messages: user-info redaction, and the base-URL check every route runs at start-up.
//!
//! See docs/upstream/deepseek.md (Base URL).

/// `url` as dsh shows it in messages, errors and notices: a user-info part (`user:password@`
/// or `token@` before the host) becomes `user:***@` / `***@`; anything else is unchanged, even
/// when `url` does not parse. The request itself still uses the URL as configured (reqwest
/// sends its user info as HTTP Basic credentials). See docs/upstream/deepseek.md (Base URL).
pub fn redact_url(url: &str) -> String {
    match userinfo(url) {
        Some((start, end, shown)) => format!("{}{shown}{}", &url[..start], &url[end..]),
        None => url.to_owned(),
    }
}

/// The byte range of `url`'s user info (without the `@`) and its redacted form.
fn userinfo(url: &str) -> Option<(usize, usize, String)> {
    let start = url.find("://")? + 3;
    let authority_len = url[start..]
        .find(['/', '?', '#'])
        .unwrap_or(url.len() - start);
    let at = url[start..start + authority_len].rfind('@')? + start;
    let info = &url[start..at];
    let shown = match info.split_once(':') {
        Some((user, _)) => format!("{user}:***"),
        None => "***".to_owned(),
    };
    Some((start, at, shown))
}

/// `text` with the user info of `base_url` (as configured) replaced by its redacted form, and
/// its password (when at least 4 bytes long) by `***` wherever else it appears.
pub fn scrub_userinfo(text: &str, base_url: &str) -> String {
    let Some((start, end, shown)) = userinfo(base_url) else {
        return text.to_owned();
    };
    let raw = &base_url[start..end];
    let mut out = text.replace(&format!("{raw}@"), &format!("{shown}@"));
    if let Some((_, password)) = raw.split_once(':')
        && password.len() >= 4
    {
        out = out.replace(password, "***");
    }
    out
}

/// Why `base_url` is not usable as a route's base URL, or `None` when it is: it must be an
/// absolute `http://` or `https://` URL with a host and without a query or fragment (the
/// adapter appends its path, e.g. `/chat/completions` or `/v1/messages`), whose path does not
/// already end with that path (the request would go to `…/v1/messages/v1/messages`).
/// `appended` names that path in the message.
pub fn base_url_problem(base_url: &str, appended: &str) -> Option<String> {
    let url = match reqwest::Url::parse(base_url.trim()) {
        Ok(u) => u,
        Err(e) => return Some(e.to_string()),
    };
    if !matches!(url.scheme(), "http" | "https") {
        return Some(format!(
            "the scheme is {:?}; expected http or https",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Some("it has no host".to_owned());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Some(format!(
            "it has a query or a fragment (dsh appends {appended} to the base URL, so it must \
             end with its path)"
        ));
    }
    let tail = appended.trim_end_matches('/');
    if !tail.is_empty() && url.path().trim_end_matches('/').ends_with(tail) {
        return Some(format!(
            "its path already ends with {tail} (dsh appends {appended} to the base URL: give \
             the part before it)"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_shown_without_their_user_info() {
        assert_eq!(
            redact_url("http://user:s3cret@127.0.0.1:18801/v1"),
            "http://user:***@127.0.0.1:18801/v1"
        );
        assert_eq!(redact_url("https://tok@h"), "https://***@h");
        assert_eq!(redact_url("https://h/p@q"), "https://h/p@q");
        assert_eq!(redact_url("notaurl"), "notaurl");
        assert_eq!(
            scrub_userinfo(
                "for url (http://user:s3cret@h/) and s3cret",
                "http://user:s3cret@h"
            ),
            "for url (http://user:***@h/) and ***"
        );
    }

    #[test]
    fn base_urls_must_be_absolute_http_without_query() {
        assert_eq!(
            base_url_problem("https://api.anthropic.com", "/v1/messages"),
            None
        );
        assert_eq!(
            base_url_problem("ftp://h", "/v1/messages").as_deref(),
            Some("the scheme is \"ftp\"; expected http or https")
        );
        assert_eq!(
            base_url_problem("https://h/x?y=1", "/v1/messages").as_deref(),
            Some(
                "it has a query or a fragment (dsh appends /v1/messages to the base URL, so it \
                 must end with its path)"
            )
        );
        for url in [
            "https://gw.example/v1/messages",
            "https://gw.example/v1/messages/",
        ] {
            assert_eq!(
                base_url_problem(url, "/v1/messages").as_deref(),
                Some(
                    "its path already ends with /v1/messages (dsh appends /v1/messages to the \
                     base URL: give the part before it)"
                )
            );
        }
        assert_eq!(
            base_url_problem("https://gw.example/anthropic", "/v1/messages"),
            None
        );
        assert_eq!(
            base_url_problem(
                "http://127.0.0.1:8080/v1/chat/completions",
                "/chat/completions"
            )
            .as_deref(),
            Some(
                "its path already ends with /chat/completions (dsh appends /chat/completions to \
                 the base URL: give the part before it)"
            )
        );
    }
}
