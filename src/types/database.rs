//! Where the store lives: a SQLite file (the default) or a PostgreSQL
//! database shared by several nodes. A PostgreSQL connection string is a
//! secret: [`DatabaseUrl`] shows it with the password masked, in `Display`
//! and `Debug` alike; only [`DatabaseUrl::secret`] gives the real text.

use std::path::PathBuf;

/// The database `aurad.yaml` (`database:`) or `AURAD_DATABASE_URL` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Database {
    /// A SQLite file (absolute path).
    Sqlite(PathBuf),
    /// A PostgreSQL database.
    Postgres(DatabaseUrl),
}

impl Database {
    /// `database:` as written: a `postgres://` or `postgresql://` URL names
    /// PostgreSQL; anything else is a SQLite file relative to `root`.
    pub fn from_setting(value: &str, root: &std::path::Path) -> Database {
        if DatabaseUrl::is_postgres(value) {
            Database::Postgres(DatabaseUrl::new(value))
        } else {
            Database::Sqlite(root.join(value))
        }
    }

    /// The SQLite file, if it is one.
    pub fn sqlite_path(&self) -> Option<&std::path::Path> {
        match self {
            Database::Sqlite(path) => Some(path),
            Database::Postgres(_) => None,
        }
    }
}

impl std::fmt::Display for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Database::Sqlite(path) => write!(f, "{}", path.display()),
            Database::Postgres(url) => write!(f, "{url}"),
        }
    }
}

/// A PostgreSQL connection string, shown with its password masked.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl {
    secret: String,
    shown: String,
}

impl DatabaseUrl {
    pub fn new(text: &str) -> DatabaseUrl {
        DatabaseUrl {
            secret: text.to_string(),
            shown: mask(text),
        }
    }

    /// Whether `text` is a PostgreSQL URL.
    pub fn is_postgres(text: &str) -> bool {
        let lower = text.trim_start().to_ascii_lowercase();
        lower.starts_with("postgres://") || lower.starts_with("postgresql://")
    }

    /// The real connection string, password included: give it to the
    /// driver only.
    pub fn secret(&self) -> &str {
        &self.secret
    }
}

impl std::fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DatabaseUrl({})", self.shown)
    }
}

/// `postgres://user:***@host/db`: the password of the authority part and
/// any `password=` query parameter masked. The query part is dropped
/// whole when it cannot be read, never shown raw.
fn mask(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else {
        return "***".into();
    };
    let (authority_and_path, query) = match rest.split_once('?') {
        Some((a, q)) => (a, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match authority_and_path.find('/') {
        Some(i) => authority_and_path.split_at(i),
        None => (authority_and_path, ""),
    };
    // The last `@` ends the user info (a password may hold `@`).
    let authority = match authority.rfind('@') {
        Some(at) => {
            let (userinfo, host) = authority.split_at(at);
            match userinfo.split_once(':') {
                Some((user, _password)) => format!("{user}:***{host}"),
                None => format!("{userinfo}{host}"),
            }
        }
        None => authority.to_string(),
    };
    let mut shown = format!("{scheme}://{authority}{path}");
    if let Some(query) = query {
        let params: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
                _ => pair.to_string(),
            })
            .collect();
        shown.push('?');
        shown.push_str(&params.join("&"));
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_show() {
        for (text, shown) in [
            (
                "postgres://u:s3cret@db:5432/aurad",
                "postgres://u:***@db:5432/aurad",
            ),
            ("postgresql://u:p@ss@h/d", "postgresql://u:***@h/d"),
            ("postgres://u@h/d", "postgres://u@h/d"),
            (
                "postgres://h/d?password=s3cret&sslmode=disable",
                "postgres://h/d?password=***&sslmode=disable",
            ),
            ("postgres://u:s3cret@h", "postgres://u:***@h"),
        ] {
            let url = DatabaseUrl::new(text);
            assert_eq!(url.to_string(), shown);
            assert!(!format!("{url:?}").contains("s3cret"));
            assert!(!format!("{url:?}").contains("ss@h"));
            assert_eq!(url.secret(), text);
        }
    }

    #[test]
    fn postgres_urls_select_postgres() {
        let root = std::path::Path::new("/p");
        assert!(matches!(
            Database::from_setting("postgres://h/d", root),
            Database::Postgres(_)
        ));
        assert!(matches!(
            Database::from_setting("PostgreSQL://h/d", root),
            Database::Postgres(_)
        ));
        assert_eq!(
            Database::from_setting("data/x.db", root),
            Database::Sqlite("/p/data/x.db".into())
        );
    }
}
