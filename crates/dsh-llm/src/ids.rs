//! Branded identifiers: distinct newtypes over `String` that serialize as plain strings.
//!
//! See docs/upstream/llm.md (Content and messages).

macro_rules! branded_id {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub String);

        impl $name {
            /// Wraps a string.
            pub fn new(s: impl Into<String>) -> Self {
                Self(s.into())
            }

            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(s.to_owned())
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self(s)
            }
        }
    };
}

branded_id! {
    /// A session's id; also the id of the agent that owns it.
    SessionId
}
branded_id! {
    /// A tool call's id as the provider assigned it (e.g. `call_00_…`).
    CallId
}
branded_id! {
    /// A message's id (a fresh UUID for messages dsh creates).
    MessageId
}
branded_id! {
    /// A provider route id (e.g. `deepseek`).
    ProviderId
}
branded_id! {
    /// A model id within a provider (e.g. `deepseek-v4-flash`).
    ModelId
}
branded_id! {
    /// A reasoning-effort level id as an adapter declares it (e.g. `high`, `max`).
    ReasoningEffortId
}

impl MessageId {
    /// A fresh random (v4) UUID message id.
    pub fn fresh() -> Self {
        Self(uuid::Uuid::new_v4().to_string())
    }
}

impl SessionId {
    /// A fresh time-ordered (v7) UUID session id.
    pub fn fresh() -> Self {
        Self(uuid::Uuid::now_v7().to_string())
    }
}
