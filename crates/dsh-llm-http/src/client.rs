//! The HTTP client every provider route uses and the one streaming POST attempt: `User-Agent`,
//! connect timeout, same-origin redirects only, the first-byte timeout, cancellation, and the
//! mapping of a redirect or non-2xx answer to a canonical failure.
//!
//! See docs/upstream/deepseek.md (Timeouts; Redirects; HTTP errors) and docs/upstream/llm.md
//! (adapter contract items 4, 5 and 8).

use std::time::Duration;

use dsh_llm::{FinishReason, LlmFailure, codes};
use tokio_util::sync::CancellationToken;

use crate::config::Timeouts;
use crate::failure::{http_failure, retry_after_ms, retry_after_ms_header};
use crate::url::redact_url;

/// `User-Agent` sent on every request: `dsh/<version>`.
pub const USER_AGENT: &str = concat!("dsh/", env!("CARGO_PKG_VERSION"));

/// Redirects a model request may follow, all to the origin of the original URL.
pub const MAX_REDIRECTS: usize = 5;

/// Redirects a model request may follow: at most [`MAX_REDIRECTS`], each to the origin (scheme,
/// host, port) of the original URL. Following one to another origin would re-send the whole
/// conversation (and 307/308 keep the POST body) to a server the user did not configure, so the
/// chain stops and the 3xx answer becomes the failure `REDIRECT_REFUSED` ("redirected the
/// request to another origin", or "too many redirects (5)" for a same-origin chain). See
/// docs/upstream/deepseek.md (Redirects).
pub fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if same_origin && attempt.previous().len() <= MAX_REDIRECTS {
            attempt.follow()
        } else {
            attempt.stop()
        }
    })
}

/// A client for one route: [`USER_AGENT`], the route's connect timeout (ms), the same-origin
/// [`redirect_policy`]. Installs rustls' `ring` crypto provider first (once per process).
///
/// # Errors
/// reqwest's builder error (e.g. the TLS backend cannot be initialised).
pub fn build_client(connect_ms: u64) -> Result<reqwest::Client, reqwest::Error> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .user_agent(USER_AGENT)
        .connect_timeout(Duration::from_millis(connect_ms))
        .redirect(redirect_policy())
        .build()
}

/// `e` and its causes, `: `-joined, without the URL (the caller names it once).
pub fn error_chain(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        text = text.replace(&format!(" for url ({url})"), "");
        text = text.replace(&format!(" ({url})"), "");
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

/// A request that failed before a response: a connect timeout is `TIMEOUT` (message "… timed
/// out after N ms connecting (connect_timeout_ms = N)"), anything else `TRANSPORT` ("… failed:
/// <cause chain>"). Both name the route and the URL.
pub fn send_failure(id: &str, connect_ms: u64, url: &str, e: &reqwest::Error) -> LlmFailure {
    if e.is_timeout() {
        let ms = connect_ms;
        return LlmFailure::new(
            codes::TIMEOUT,
            format!(
                "{id}: POST {url} timed out after {ms} ms connecting (connect_timeout_ms = {ms})"
            ),
        );
    }
    LlmFailure::new(
        codes::TRANSPORT,
        format!("{id}: POST {url} failed: {}", error_chain(e)),
    )
}

/// A failed read of a non-streaming body (or a request): `TIMEOUT` when reqwest timed out,
/// else `TRANSPORT`, as "<route>: <what>: <cause chain>".
pub fn transport_failure(route: &str, what: &str, e: &reqwest::Error) -> LlmFailure {
    let code = if e.is_timeout() {
        codes::TIMEOUT
    } else {
        codes::TRANSPORT
    };
    LlmFailure::new(code, format!("{route}: {what}: {}", error_chain(e)))
}

/// The stream-idle failure: "… timed out after N ms without data …".
pub fn idle_failure(route: &str, url: &str, idle: Duration) -> LlmFailure {
    let ms = idle.as_millis();
    LlmFailure::new(
        codes::TIMEOUT,
        format!(
            "{route}: POST {url} timed out after {ms} ms without data from the provider \
             (stream_idle_timeout_ms = {ms})"
        ),
    )
}

/// The failure of a call the caller cancelled: `ABORTED`, "the call was cancelled".
pub fn aborted() -> LlmFailure {
    LlmFailure::new(codes::ABORTED, "the call was cancelled")
}

/// What [`send`] needs to know of the route it sends for.
#[derive(Debug, Clone, Copy)]
pub struct SendRoute<'a> {
    /// The route id (prefix of every message).
    pub id: &'a str,
    /// The route's timeouts (ms).
    pub timeouts: Timeouts,
    /// Env var holding the key (named in the `AUTH` hint).
    pub key_env: Option<&'a str>,
    /// The key itself (redacted from provider messages).
    pub key: Option<&'a str>,
}

/// A successful response with the provider's request id (`x-request-id` or `request-id`).
#[derive(Debug)]
pub struct Sent {
    /// The 2xx response, its body unread.
    pub response: reqwest::Response,
    /// The provider's request id, when sent.
    pub request_id: Option<String>,
}

/// Sends `req` (a POST to `request_url`) once: `Err` carries the terminal finish to yield —
/// `aborted` when `signal` fires; `TIMEOUT` after `first_byte_ms` without the response headers
/// ("… timed out after N ms waiting for the response headers (first_byte_timeout_ms = N)");
/// `TIMEOUT`/`TRANSPORT` when the request fails ([`send_failure`]); `REDIRECT_REFUSED` for a
/// redirect to another origin or past [`MAX_REDIRECTS`]; else the [`http_failure`] of a non-2xx
/// answer, with `Retry-After` / `retry-after-ms` and the request id. Messages name the URL with
/// its user info redacted.
///
/// # Errors
/// As described: the `FinishReason` to end the stream with.
pub async fn send(
    route: SendRoute<'_>,
    request_url: &str,
    req: reqwest::RequestBuilder,
    signal: &CancellationToken,
) -> Result<Sent, FinishReason> {
    let url = redact_url(request_url);
    let first_byte = Duration::from_millis(route.timeouts.first_byte_ms);
    let idle = Duration::from_millis(route.timeouts.idle_ms);
    let resp = tokio::select! {
        biased;
        () = signal.cancelled() => return Err(FinishReason::Aborted { failure: aborted() }),
        r = tokio::time::timeout(first_byte, req.send()) => match r {
            Err(_) => return Err(FinishReason::Error { failure: LlmFailure::new(
                codes::TIMEOUT,
                format!(
                    "{}: POST {url} timed out after {} ms waiting for the response headers \
                     (first_byte_timeout_ms = {})",
                    route.id,
                    first_byte.as_millis(),
                    first_byte.as_millis()
                ),
            )}),
            Ok(Err(e)) => return Err(FinishReason::Error {
                failure: send_failure(route.id, route.timeouts.connect_ms, &url, &e),
            }),
            Ok(Ok(resp)) => resp,
        },
    };
    let status = resp.status().as_u16();
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let request_id = header("x-request-id").or_else(|| header("request-id"));
    if resp.status().is_redirection() {
        let location = header("location").unwrap_or_default();
        let target = resp.url().join(&location).ok();
        let same_origin = target.as_ref().is_some_and(|t| {
            reqwest::Url::parse(request_url).is_ok_and(|u| u.origin() == t.origin())
        });
        let message = if same_origin {
            format!(
                "{}: POST {url}: too many redirects ({MAX_REDIRECTS}); dsh stops following them \
                 (HTTP {status})",
                route.id
            )
        } else {
            let target = target.map_or(location, |u| u.to_string());
            format!(
                "{}: the provider redirected the request to another origin ({}); dsh does not \
                 follow it (HTTP {status})",
                route.id,
                redact_url(&target)
            )
        };
        let mut failure = LlmFailure::new(codes::REDIRECT_REFUSED, message).with_status(status);
        failure.request_id = request_id;
        return Err(FinishReason::Error { failure });
    }
    if !resp.status().is_success() {
        let retry = header("retry-after-ms")
            .and_then(|v| retry_after_ms_header(&v))
            .or_else(|| header("retry-after").and_then(|v| retry_after_ms(&v)));
        let text = tokio::select! {
            biased;
            () = signal.cancelled() => return Err(FinishReason::Aborted { failure: aborted() }),
            t = tokio::time::timeout(idle, resp.bytes()) => match t {
                Ok(Ok(t)) => String::from_utf8_lossy(&t).into_owned(),
                _ => String::new(),
            },
        };
        let failure = http_failure(
            route.id,
            status,
            &text,
            retry,
            request_id,
            route.key_env,
            route.key,
        );
        tracing::debug!(route = %route.id, status, code = %failure.code, "model request failed");
        return Err(FinishReason::Error { failure });
    }
    Ok(Sent {
        response: resp,
        request_id,
    })
}
