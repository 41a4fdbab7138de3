//! A real mail server for one test, made of Debian's packages and started
//! as child processes on free 127.0.0.1 ports, with everything (config,
//! mail, queue, logs) in a temporary directory:
//!
//! - **Dovecot** (`dovecot-imapd`, `dovecot-lmtpd`): IMAP with IDLE for
//!   reading mailboxes, and LMTP for delivering into them. Users come from
//!   a passwd-file; mail is Maildir under the directory, owned by `nobody`
//!   (Dovecot refuses mail access as root). `ssl = no`, plaintext logins.
//! - **Exim** (`exim4-daemon-light`): the SMTP server the connector sends
//!   through. It takes mail only from a logged-in user (AUTH PLAIN/LOGIN
//!   against a password file) and hands every message for `example.test`
//!   to Dovecot's LMTP, so a mail sent over SMTP lands in the recipient's
//!   IMAP mailbox like on a real provider.
//!
//! Why this pair: Dovecot's own `submission` service only relays to an SMTP
//! server, and its LMTP refuses the `EHLO` SMTP clients (lettre) send; Exim
//! runs as a foreground child with a config of our own (`exim4 -C FILE
//! -bdf`), spool and logs in the directory, while OpenSMTPD and Postfix
//! keep their queue and control socket at fixed system paths (one server
//! at a time per machine). `.ci/run` installs the three packages.
//!
//! Dovecot and Exim need root here (Dovecot switches to the mail user,
//! Exim keeps its spool as root): without root, or without the packages,
//! a test says it skipped, unless `CI` is set: then it fails.
//!
//! Also an IMAP and SMTP client for the tests' side: sending a mail as a
//! user, and reading a mailbox (flags included) as a mail client would.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::TryStreamExt;

pub const DOMAIN: &str = "example.test";
/// The channel's mailbox.
pub const BOT: &str = "agent@example.test";
/// A person writing to it.
pub const ALICE: &str = "alice@example.test";

const DOVECOT: &str = "/usr/sbin/dovecot";
const EXIM: &str = "/usr/sbin/exim4";
const OPENSSL: &str = "/usr/bin/openssl";

pub struct MailServer {
    dir: tempfile::TempDir,
    pub imap_port: u16,
    pub smtp_port: u16,
    /// IMAP over TLS from the first byte, with [`start_with_tls`](Self::start_with_tls).
    pub imaps_port: u16,
    /// SMTP over TLS from the first byte, likewise.
    pub smtps_port: u16,
    tls: bool,
    lmtp_port: u16,
    dovecot: Option<Child>,
    exim: Option<Child>,
}

/// Why the server cannot run here, if it cannot.
fn missing() -> Option<String> {
    for (bin, package) in [
        (DOVECOT, "dovecot-imapd dovecot-lmtpd"),
        ("/usr/lib/dovecot/lmtp", "dovecot-lmtpd"),
        ("/usr/lib/dovecot/imap", "dovecot-imapd"),
        (EXIM, "exim4-daemon-light"),
    ] {
        if !Path::new(bin).exists() {
            return Some(format!(
                "{bin} is missing: install it with `apt-get install -y --no-install-recommends {package}` (.ci/run does)"
            ));
        }
    }
    // SAFETY: getuid has no preconditions and cannot fail.
    if unsafe { libc::getuid() } != 0 {
        return Some("the test mail server (Dovecot, Exim) needs root: Dovecot switches to the mail user and Exim keeps its spool".into());
    }
    None
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

/// The uid and gid of user `name`, from /etc/passwd.
fn user(name: &str) -> (u32, u32) {
    let passwd = std::fs::read_to_string("/etc/passwd").expect("/etc/passwd");
    passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&name)).then(|| (f[2].parse().unwrap(), f[3].parse().unwrap()))
        })
        .unwrap_or_else(|| panic!("no user `{name}` in /etc/passwd"))
}

impl MailServer {
    /// Starts a server with mailboxes for [`BOT`] and [`ALICE`] (password
    /// [`password`]); `None` (saying why) when it cannot run here and `CI`
    /// is not set.
    pub fn start(test: &str) -> Option<MailServer> {
        MailServer::start_with(test, true, false)
    }

    /// A server that also speaks TLS: STARTTLS on the plain ports, TLS
    /// from the first byte on [`imaps_port`](Self::imaps_port) and
    /// [`smtps_port`](Self::smtps_port), with a certificate for
    /// `localhost` and 127.0.0.1 signed by a CA of the test's own
    /// ([`ca_file`](Self::ca_file)), made with the `openssl` command.
    pub fn start_with_tls(test: &str) -> Option<MailServer> {
        MailServer::start_with(test, true, true)
    }

    /// The certificate of the CA that signed the server's, to trust.
    pub fn ca_file(&self) -> PathBuf {
        self.path("ca.pem")
    }

    /// A server whose IMAP lacks IDLE (Dovecot told to leave it out of
    /// its capabilities), for a client that must poll.
    pub fn start_without_idle(test: &str) -> Option<MailServer> {
        MailServer::start_with(test, false, false)
    }

    fn start_with(test: &str, idle: bool, tls: bool) -> Option<MailServer> {
        let openssl = (tls && !Path::new(OPENSSL).exists())
            .then(|| format!("{OPENSSL} is missing: install it with `apt-get install -y openssl`"));
        if let Some(why) = missing().or(openssl) {
            assert!(
                std::env::var_os("CI").is_none(),
                "{test}: CI is set but the mail server cannot run: {why}"
            );
            eprintln!("{test}: skipped: {why}");
            return None;
        }
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut server = MailServer {
            imap_port: free_port(),
            smtp_port: free_port(),
            imaps_port: if tls { free_port() } else { 0 },
            smtps_port: if tls { free_port() } else { 0 },
            tls,
            lmtp_port: free_port(),
            dir,
            dovecot: None,
            exim: None,
        };
        server.configure(idle);
        server.start_dovecot();
        server.start_exim();
        Some(server)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn configure(&self, idle: bool) {
        use std::os::unix::fs::PermissionsExt;
        let root = self.dir.path();
        // Dovecot's unprivileged processes walk into it.
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
        for sub in ["run", "state", "mail", "exim"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        // Exim receives and delivers as its own user, Debian-exim.
        let (exim_uid, exim_gid) = user("Debian-exim");
        std::os::unix::fs::chown(root.join("exim"), Some(exim_uid), Some(exim_gid)).unwrap();
        let (uid, gid) = user("nobody");
        std::os::unix::fs::chown(root.join("mail"), Some(uid), Some(gid)).unwrap();
        let users: String = [BOT, ALICE]
            .iter()
            .map(|u| format!("{u}:{{PLAIN}}{}\n", password(u)))
            .collect();
        std::fs::write(root.join("users"), users).unwrap();
        let exim_users: String = [BOT, ALICE]
            .iter()
            .map(|u| format!("{u}: {}\n", password(u)))
            .collect();
        std::fs::write(root.join("exim-passwd"), exim_users).unwrap();
        let d = root.display();
        let (dovecot_tls, exim_tls) = if self.tls {
            self.certificates();
            (
                format!("ssl = yes\nssl_cert = <{d}/cert.pem\nssl_key = <{d}/key.pem\n"),
                format!(
                    "tls_advertise_hosts = *\ntls_certificate = {d}/cert.pem\ntls_privatekey = {d}/key.pem\ntls_on_connect_ports = {smtps}\ndaemon_smtp_ports = {smtp} : {smtps}\n",
                    smtp = self.smtp_port,
                    smtps = self.smtps_port
                ),
            )
        } else {
            (
                "ssl = no\n".to_string(),
                format!(
                    "tls_advertise_hosts =\ndaemon_smtp_ports = {}\n",
                    self.smtp_port
                ),
            )
        };
        // Dovecot's capabilities after login, as it announces them by
        // default, without IDLE.
        let capabilities = if idle {
            String::new()
        } else {
            "imap_capability = IMAP4rev1 SASL-IR LOGIN-REFERRALS ID ENABLE SORT SORT=DISPLAY THREAD=REFERENCES THREAD=REFS THREAD=ORDEREDSUBJECT MULTIAPPEND URL-PARTIAL CATENATE UNSELECT CHILDREN NAMESPACE UIDPLUS LIST-EXTENDED I18NLEVEL=1 CONDSTORE QRESYNC ESEARCH ESORT SEARCHRES WITHIN CONTEXT=SEARCH LIST-STATUS BINARY MOVE SNIPPET=FUZZY PREVIEW=FUZZY PREVIEW STATUS=SIZE SAVEDATE LITERAL+ NOTIFY SPECIAL-USE\n".to_string()
        };
        let dovecot = format!(
            r#"base_dir = {d}/run
state_dir = {d}/state
log_path = {d}/dovecot.log
protocols = imap lmtp
listen = 127.0.0.1
{dovecot_tls}disable_plaintext_auth = no
auth_mechanisms = plain login
hostname = mail.{DOMAIN}
postmaster_address = postmaster@{DOMAIN}
mail_location = maildir:{d}/mail/%u
{capabilities}passdb {{
  driver = passwd-file
  args = scheme=PLAIN {d}/users
}}
userdb {{
  driver = static
  args = uid={uid} gid={gid} home={d}/mail/%u
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {imap}
  }}
  inet_listener imaps {{
    address = 127.0.0.1
    port = {imaps}
  }}
}}
service lmtp {{
  inet_listener lmtp {{
    address = 127.0.0.1
    port = {lmtp}
  }}
}}
"#,
            imap = self.imap_port,
            imaps = self.imaps_port,
            lmtp = self.lmtp_port,
        );
        std::fs::write(root.join("dovecot.conf"), dovecot).unwrap();
        let exim = format!(
            r#"primary_hostname = smtp.{DOMAIN}
spool_directory = {d}/exim
log_file_path = {d}/exim/%slog
pid_file_path = {d}/exim/exim.pid
local_interfaces = 127.0.0.1
{exim_tls}domainlist local_domains = {DOMAIN}
acl_smtp_rcpt = acl_check_rcpt
auth_advertise_hosts = *
host_lookup =
rfc1413_hosts =
keep_environment =

begin acl
acl_check_rcpt:
  accept authenticated = *
  deny message = log in first

begin routers
to_dovecot:
  driver = manualroute
  domains = +local_domains
  transport = dovecot_lmtp
  route_list = * 127.0.0.1
  self = send

begin transports
dovecot_lmtp:
  driver = smtp
  protocol = lmtp
  port = {lmtp}
  allow_localhost

begin authenticators
plain:
  driver = plaintext
  public_name = PLAIN
  server_prompts = :
  server_condition = ${{if eq{{$auth3}}{{${{lookup{{$auth2}}lsearch{{{d}/exim-passwd}}{{$value}}fail}}}}}}
  server_set_id = $auth2
login:
  driver = plaintext
  public_name = LOGIN
  server_prompts = Username:: : Password::
  server_condition = ${{if eq{{$auth2}}{{${{lookup{{$auth1}}lsearch{{{d}/exim-passwd}}{{$value}}fail}}}}}}
  server_set_id = $auth1
"#,
            lmtp = self.lmtp_port,
        );
        std::fs::write(root.join("exim.conf"), exim).unwrap();
    }

    /// A CA and a server certificate for `localhost` and 127.0.0.1
    /// signed by it, with the `openssl` command.
    fn certificates(&self) {
        let root = self.dir.path();
        std::fs::write(
            root.join("server.ext"),
            "subjectAltName = DNS:localhost, IP:127.0.0.1\nbasicConstraints = CA:FALSE\nextendedKeyUsage = serverAuth\n",
        )
        .unwrap();
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let steps: [&[&str]; 3] = [
            &[
                &["req", "-x509"],
                &ec[..],
                &[
                    "-keyout",
                    "ca.key",
                    "-out",
                    "ca.pem",
                    "-days",
                    "2",
                    "-subj",
                    "/CN=aurad test CA",
                ],
            ]
            .concat(),
            &[
                &["req"],
                &ec[..],
                &[
                    "-keyout",
                    "key.pem",
                    "-out",
                    "server.csr",
                    "-subj",
                    "/CN=localhost",
                ],
            ]
            .concat(),
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "cert.pem",
                "-days",
                "2",
                "-extfile",
                "server.ext",
            ],
        ];
        for args in steps {
            let out = Command::new(OPENSSL)
                .args(args)
                .current_dir(root)
                .output()
                .expect("openssl runs");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // Exim reads the key as its own user.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(root.join("key.pem"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
    }

    fn start_dovecot(&mut self) {
        let child = Command::new(DOVECOT)
            .arg("-F")
            .arg("-c")
            .arg(self.path("dovecot.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("dovecot starts");
        self.dovecot = Some(child);
        self.wait_listening(self.imap_port, "dovecot's IMAP");
        self.wait_listening(self.lmtp_port, "dovecot's LMTP");
    }

    fn start_exim(&mut self) {
        let child = Command::new(EXIM)
            .arg("-C")
            .arg(self.path("exim.conf"))
            .arg("-bdf")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            // Exim says on every delivery that `-C` cost it root; kept
            // for the logs rather than on the test's console.
            .stderr(std::fs::File::create(self.path("exim.stderr")).unwrap())
            .spawn()
            .expect("exim starts");
        self.exim = Some(child);
        self.wait_listening(self.smtp_port, "exim's SMTP");
    }

    fn wait_listening(&mut self, port: u16, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "{what} is not listening on 127.0.0.1:{port} after 20s; logs: {}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The servers' logs, for a failure message.
    pub fn logs(&self) -> String {
        let read = |p: PathBuf| std::fs::read_to_string(p).unwrap_or_default();
        format!(
            "\n--- dovecot.log\n{}\n--- exim mainlog\n{}\n--- exim paniclog\n{}\n--- exim stderr\n{}",
            read(self.path("dovecot.log")),
            read(self.path("exim/mainlog")),
            read(self.path("exim/paniclog")),
            read(self.path("exim.stderr")),
        )
    }

    /// Stops Dovecot (every IMAP connection drops) and starts it again on
    /// the same port, with the same mail.
    pub fn restart_imap(&mut self) {
        if let Some(child) = self.dovecot.take() {
            stop(child);
        }
        self.start_dovecot();
    }

    /// Stops Dovecot and leaves it stopped (connections are refused).
    pub fn stop_imap(&mut self) {
        if let Some(child) = self.dovecot.take() {
            stop(child);
        }
    }

    /// Starts Dovecot again after [`stop_imap`](Self::stop_imap).
    pub fn start_imap(&mut self) {
        self.start_dovecot();
    }

    /// Sends `raw` (a whole RFC 5322 message) from `from` to `to` over
    /// SMTP, logged in as `from`, like a mail client.
    pub async fn send(&self, from: &str, to: &str, raw: &str) {
        use lettre::AsyncTransport;
        let transport =
            lettre::AsyncSmtpTransport::<lettre::Tokio1Executor>::builder_dangerous("127.0.0.1")
                .port(self.smtp_port)
                .credentials(lettre::transport::smtp::authentication::Credentials::new(
                    from.to_string(),
                    password(from),
                ))
                .build();
        let envelope =
            lettre::address::Envelope::new(Some(from.parse().unwrap()), vec![to.parse().unwrap()])
                .unwrap();
        transport
            .send_raw(
                &envelope,
                raw.replace("\r\n", "\n").replace('\n', "\r\n").as_bytes(),
            )
            .await
            .unwrap_or_else(|e| panic!("SMTP send from {from} to {to}: {e}{}", self.logs()));
    }

    /// The messages of `user`'s INBOX, read over IMAP without changing
    /// them (EXAMINE: read-only, no `\Seen` set).
    pub async fn mailbox(&self, user: &str) -> Vec<Stored> {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", self.imap_port))
            .await
            .unwrap();
        let mut client = async_imap::Client::new(tcp);
        client.read_response().await.unwrap().unwrap();
        let mut session = client
            .login(user, password(user))
            .await
            .map_err(|(e, _)| e)
            .unwrap();
        let mailbox = session.examine("INBOX").await.unwrap();
        let mut out = Vec::new();
        if mailbox.exists > 0 {
            let fetched: Vec<_> = session
                .fetch("1:*", "(UID FLAGS BODY.PEEK[])")
                .await
                .unwrap()
                .try_collect()
                .await
                .unwrap();
            for f in fetched {
                out.push(Stored {
                    uid: f.uid.unwrap_or(0),
                    seen: f
                        .flags()
                        .any(|fl| matches!(fl, async_imap::types::Flag::Seen)),
                    raw: String::from_utf8_lossy(f.body().unwrap_or_default()).into_owned(),
                });
            }
        }
        let _ = session.logout().await;
        out
    }

    /// What the IMAP server announces to `user` once logged in.
    pub async fn capabilities(&self, user: &str) -> Vec<String> {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", self.imap_port))
            .await
            .unwrap();
        let mut client = async_imap::Client::new(tcp);
        client.read_response().await.unwrap().unwrap();
        let mut session = client
            .login(user, password(user))
            .await
            .map_err(|(e, _)| e)
            .unwrap();
        let caps = session.capabilities().await.unwrap();
        let out = caps
            .iter()
            .map(|c| match c {
                async_imap::types::Capability::Imap4rev1 => "IMAP4rev1".to_string(),
                async_imap::types::Capability::Auth(a) => format!("AUTH={a}"),
                async_imap::types::Capability::Atom(a) => a.to_string(),
            })
            .collect();
        let _ = session.logout().await;
        out
    }

    /// Waits until `user`'s INBOX holds a message `pred` accepts.
    pub async fn wait_for(&self, user: &str, what: &str, pred: impl Fn(&Stored) -> bool) -> Stored {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(m) = self.mailbox(user).await.into_iter().find(|m| pred(m)) {
                return m;
            }
            assert!(
                Instant::now() < deadline,
                "{user}'s mailbox never got {what} within 30s; it holds: {:#?}{}",
                self.mailbox(user).await,
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A message as an IMAP client reads it.
#[derive(Debug, Clone)]
pub struct Stored {
    pub uid: u32,
    pub seen: bool,
    pub raw: String,
}

impl Stored {
    /// Header `name`'s value (unfolded), if the message has it.
    pub fn header(&self, name: &str) -> Option<String> {
        let head = self.raw.split("\r\n\r\n").next().unwrap_or("");
        let mut value: Option<String> = None;
        for line in head.split("\r\n") {
            if line.starts_with([' ', '\t']) {
                if let Some(v) = value.as_mut() {
                    v.push(' ');
                    v.push_str(line.trim());
                }
                continue;
            }
            if value.is_some() {
                break;
            }
            if let Some((k, v)) = line.split_once(':')
                && k.eq_ignore_ascii_case(name)
            {
                value = Some(v.trim().to_string());
            }
        }
        value
    }

    /// The body, after the headers.
    pub fn body(&self) -> &str {
        self.raw.split_once("\r\n\r\n").map_or("", |(_, b)| b)
    }
}

/// `user`'s password on the test server.
pub fn password(user: &str) -> String {
    format!("pw-{}", user.split('@').next().unwrap_or(user))
}

/// Stops a server with SIGTERM (so it takes its worker processes with it)
/// and waits for it; SIGKILL after 10 s.
fn stop(mut child: Child) {
    // SAFETY: kill with a child's pid and a signal number has no memory
    // preconditions.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for MailServer {
    fn drop(&mut self) {
        if let Some(child) = self.exim.take() {
            stop(child);
        }
        if let Some(child) = self.dovecot.take() {
            stop(child);
        }
    }
}
