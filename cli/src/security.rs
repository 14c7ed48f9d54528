//! `ringlog users add|remove|list` and `ringlog acl add|remove|list`.
//!
//! Users and rules change through any broker (AlterUsers, CreateAcls,
//! DeleteAcls: the logged-in user needs alter on the cluster). The first
//! user is written before any broker runs, straight into the registry:
//! `--data-dir DIR` for a standalone broker's data directory, `--etcd URL`
//! for a cluster's etcd. A password is read from `--password-file` or, at a
//! terminal, typed twice without echo — never taken from the command line,
//! where `ps` and shell histories would keep it. The client turns it into
//! a salted SCRAM credential; the password itself goes nowhere.

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use coordinator::security::{Changed, SecurityChange, SecurityRecords};
use protocol::acl::{AclRule, Operation, PatternType, Permission, ResourceType, CLUSTER};
use protocol::codec::security::AclFilter;
use protocol::scram::{Credential, ITERATIONS_DEFAULT, ITERATIONS_MAX, ITERATIONS_MIN};
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub enum UsersCommand {
    /// Add a user, or give one a new password. The password is read from
    /// --password-file when no --user logs in (the first user, with
    /// --data-dir or --etcd), else from --new-password-file; without
    /// either, typed twice at a terminal (or the first line of stdin).
    Add {
        /// The user name (letters, digits, '.', '_', '@', '-').
        name: String,
        /// The file whose first line is the new user's password.
        #[arg(long, value_name = "FILE")]
        new_password_file: Option<PathBuf>,
        /// PBKDF2 iterations of the credential (4096 at least).
        #[arg(long, default_value_t = ITERATIONS_DEFAULT)]
        iterations: u32,
        /// A new password for a user whose old one leaked: its connections
        /// that logged in with another password are closed (within a
        /// second, on every broker). Without it they go on (a planned
        /// rotation; a broker logs in with the password it read at start).
        #[arg(long)]
        end_sessions: bool,
        #[command(flatten)]
        store: Store,
    },
    /// Remove a user: it can no longer log in, and its open connections
    /// are closed (within a second, on every broker).
    Remove {
        /// The user name.
        name: String,
        #[command(flatten)]
        store: Store,
    },
    /// The users who may log in.
    List {
        #[command(flatten)]
        store: Store,
    },
}

/// Where users are kept, for writing them before any broker runs; absent,
/// through the brokers.
#[derive(Args, Debug)]
pub struct Store {
    /// A standalone broker's data directory: write its security.toml.
    #[arg(long, value_name = "DIR", conflicts_with = "etcd")]
    data_dir: Option<PathBuf>,
    /// A cluster's etcd endpoints (comma-separated): write its registry.
    #[arg(long, value_name = "URL", value_delimiter = ',')]
    etcd: Vec<String>,
    /// With --etcd: the cluster's name (its brokers' `cluster`).
    #[arg(long, default_value = "ringlog", requires = "etcd")]
    cluster: String,
    /// With --etcd: a secured etcd's CA certificates (PEM), for https://
    /// endpoints.
    #[arg(long, value_name = "FILE", requires = "etcd")]
    etcd_ca: Option<PathBuf>,
    /// With --etcd-ca: a client certificate (PEM) for an etcd that asks
    /// for one.
    #[arg(long, value_name = "FILE", requires = "etcd_ca")]
    etcd_cert: Option<PathBuf>,
    /// With --etcd-cert: its private key (PEM).
    #[arg(long, value_name = "FILE", requires = "etcd_cert")]
    etcd_key: Option<PathBuf>,
    /// With --etcd: an etcd user (etcd's own authentication).
    #[arg(long, value_name = "NAME", requires = "etcd")]
    etcd_user: Option<String>,
    /// With --etcd-user: the file whose first line is its password.
    #[arg(long, value_name = "FILE", requires = "etcd_user")]
    etcd_password_file: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum AclCommand {
    /// Allow (or with --deny, deny) a principal an operation on resources.
    Add(RuleArgs),
    /// Remove a rule, given as it was added.
    Remove(RuleArgs),
    /// The rules, or those of a principal or resource.
    List(FilterArgs),
}

/// A rule on the command line.
#[derive(Args, Debug)]
pub struct RuleArgs {
    /// Who: User:NAME, or User:* for everyone.
    #[arg(long)]
    principal: String,
    /// What: read, write, create, delete, alter, describe or all.
    #[arg(long)]
    operation: String,
    /// A topic (with --prefix: every topic whose name starts so; * for all).
    #[arg(long, group = "resource")]
    topic: Option<String>,
    /// A consumer group (with --prefix: every group whose name starts so).
    #[arg(long, group = "resource")]
    group: Option<String>,
    /// The cluster (topic creation, elections, users, rules, followers).
    #[arg(long, group = "resource")]
    cluster: bool,
    /// The name is a prefix.
    #[arg(long)]
    prefix: bool,
    /// Deny instead of allow (a deny beats every allow).
    #[arg(long)]
    deny: bool,
}

/// A rule filter on the command line.
#[derive(Args, Debug)]
pub struct FilterArgs {
    /// Only this principal's rules.
    #[arg(long)]
    principal: Option<String>,
    /// Only rules of this topic name (or prefix).
    #[arg(long, group = "resource")]
    topic: Option<String>,
    /// Only rules of this group name (or prefix).
    #[arg(long, group = "resource")]
    group: Option<String>,
    /// Only the cluster's rules.
    #[arg(long, group = "resource")]
    cluster: bool,
}

impl RuleArgs {
    fn rule(&self) -> anyhow::Result<AclRule> {
        let (resource, name) = match (&self.topic, &self.group, self.cluster) {
            (Some(topic), None, false) => (ResourceType::Topic, topic.clone()),
            (None, Some(group), false) => (ResourceType::Group, group.clone()),
            (None, None, true) => (ResourceType::Cluster, CLUSTER.to_string()),
            _ => bail!("name one resource: --topic NAME, --group NAME or --cluster"),
        };
        let operation = Operation::from_word(&self.operation).with_context(|| {
            format!(
                "unknown operation {:?}: read, write, create, delete, alter, describe or all",
                self.operation
            )
        })?;
        let rule = AclRule {
            permission: if self.deny {
                Permission::Deny
            } else {
                Permission::Allow
            },
            principal: self.principal.clone(),
            operation,
            resource,
            pattern: if self.prefix {
                PatternType::Prefixed
            } else {
                PatternType::Literal
            },
            name,
        };
        rule.check()?;
        Ok(rule)
    }
}

/// `ringlog users ...`.
///
/// `password_file`: the global --password-file, when no --user logged in
/// with it (then it holds the new user's password).
#[expect(
    clippy::too_many_lines,
    reason = "one match over the users subcommands"
)]
pub fn users(
    brokers: &str,
    command: UsersCommand,
    password_file: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    match command {
        UsersCommand::Add {
            name,
            new_password_file,
            iterations,
            end_sessions,
            store,
        } => {
            if new_password_file.is_some() && password_file.is_some() {
                bail!("give the new user's password once: --password-file (without --user) or --new-password-file");
            }
            let password_file = new_password_file.as_deref().or(password_file);
            protocol::scram::check_user(&name)?;
            if !(ITERATIONS_MIN..=ITERATIONS_MAX).contains(&iterations) {
                bail!("--iterations must be {ITERATIONS_MIN}..={ITERATIONS_MAX}, got {iterations}");
            }
            let password = match password_file {
                Some(file) => read_password(file)?,
                None => ask_password(&name)?,
            };
            let mut credential = Credential::new(&password, iterations);
            if end_sessions {
                credential = credential.ending_sessions();
            }
            let change = SecurityChange::Users {
                upserts: vec![(name.clone(), credential.clone())],
                deletions: Vec::new(),
            };
            match store.direct(change)? {
                Some(_) => {}
                None => {
                    super::connect(brokers)?.alter_users(&[(name.clone(), credential)], &[])?;
                }
            }
            println!("user {name} can log in (SCRAM-SHA-256, {iterations} iterations)");
            if end_sessions {
                println!("its connections that logged in with another password are closed");
            }
            Ok(())
        }
        UsersCommand::Remove { name, store } => {
            protocol::scram::check_user(&name)?;
            let change = SecurityChange::Users {
                upserts: Vec::new(),
                deletions: vec![name.clone()],
            };
            let removed = match store.direct(change)? {
                Some(changed) => changed.removed,
                None => {
                    super::connect(brokers)?
                        .alter_users(&[], std::slice::from_ref(&name))?
                        .1
                }
            };
            if removed == 0 {
                bail!("there is no user {name}");
            }
            println!("user {name} removed; its open connections are closed");
            Ok(())
        }
        UsersCommand::List { store } => {
            let names = match store.read()? {
                Some(records) => records.users.into_keys().collect(),
                None => super::connect(brokers)?.list_users()?,
            };
            for name in names {
                println!("{name}");
            }
            Ok(())
        }
    }
}

impl Store {
    /// Applies `change` straight to the registry when one is named;
    /// `None` when the change goes through the brokers.
    fn direct(&self, change: SecurityChange) -> anyhow::Result<Option<Changed>> {
        if let Some(dir) = &self.data_dir {
            anyhow::ensure!(
                dir.is_dir(),
                "--data-dir {} is not a directory (create it, or start the broker once)",
                dir.display()
            );
            return Ok(Some(coordinator::security::change_file(dir, &change)?));
        }
        if self.etcd.is_empty() {
            return Ok(None);
        }
        let changed = self.block_on(coordinator::security::change_at(
            &self.etcd,
            &self.access(),
            &self.cluster,
            &change,
        ))?;
        Ok(Some(changed))
    }

    /// Reads the registry named, if one is.
    fn read(&self) -> anyhow::Result<Option<SecurityRecords>> {
        if let Some(dir) = &self.data_dir {
            return Ok(Some(coordinator::security::read_file(dir)?));
        }
        if self.etcd.is_empty() {
            return Ok(None);
        }
        let records = self.block_on(coordinator::security::read_at(
            &self.etcd,
            &self.access(),
            &self.cluster,
        ))?;
        Ok(Some(records))
    }

    fn access(&self) -> coordinator::registry::EtcdAccess {
        coordinator::registry::EtcdAccess {
            ca: self.etcd_ca.clone(),
            cert: self.etcd_cert.clone(),
            key: self.etcd_key.clone(),
            user: self.etcd_user.clone(),
            password_file: self.etcd_password_file.clone(),
        }
    }

    fn block_on<T>(
        &self,
        work: impl std::future::Future<Output = Result<T, coordinator::registry::RegistryError>>,
    ) -> anyhow::Result<T> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        // The CLI takes SIGPIPE's default action (a closed stdout ends it
        // quietly), but tokio writes to sockets without MSG_NOSIGNAL: an
        // etcd that closes a TLS connection (no client certificate) would
        // kill the process instead of failing the request. Ignored while
        // talking to etcd.
        // SAFETY: changing a signal's disposition; the CLI's threads do not
        // depend on SIGPIPE.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
        let result = runtime.block_on(work);
        // SAFETY: as above, back to the CLI's default.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
        result.with_context(|| format!("etcd at {}", self.etcd.join(",")))
    }
}

/// `ringlog acl ...`.
pub fn acl(brokers: &str, command: AclCommand) -> anyhow::Result<()> {
    let client = super::connect(brokers)?;
    match command {
        AclCommand::Add(args) => {
            let rule = args.rule()?;
            let created = client.create_acls(std::slice::from_ref(&rule))?;
            println!(
                "{rule}{}",
                if created == 0 {
                    " (it was there already)"
                } else {
                    ""
                }
            );
        }
        AclCommand::Remove(args) => {
            let rule = args.rule()?;
            if client.delete_acls(std::slice::from_ref(&rule))? == 0 {
                bail!("no such rule: {rule}");
            }
            println!("removed: {rule}");
        }
        AclCommand::List(args) => {
            let (resource, name) = match (&args.topic, &args.group, args.cluster) {
                (Some(topic), _, _) => (Some(ResourceType::Topic), Some(topic.clone())),
                (_, Some(group), _) => (Some(ResourceType::Group), Some(group.clone())),
                (_, _, true) => (Some(ResourceType::Cluster), None),
                _ => (None, None),
            };
            let filter = AclFilter {
                principal: args.principal,
                resource,
                name,
            };
            for rule in client.describe_acls(&filter)? {
                println!("{rule}");
            }
        }
    }
    Ok(())
}

/// The first line of a password file.
pub fn read_password(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    Ok(coordinator::security::read_password_file(path)?)
}

/// A new password: typed twice without echo at a terminal, else the first
/// line of stdin.
fn ask_password(user: &str) -> anyhow::Result<Vec<u8>> {
    use std::io::BufRead;
    // SAFETY: isatty only reads the descriptor's state.
    let terminal = unsafe { libc::isatty(0) } == 1;
    let read_line = |prompt: &str| -> anyhow::Result<Vec<u8>> {
        if terminal {
            eprint!("{prompt}");
        }
        let _echo = terminal.then(EchoOff::new).flatten();
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        if terminal {
            eprintln!();
        }
        Ok(line.trim_end_matches(['\n', '\r']).as_bytes().to_vec())
    };
    let password = read_line(&format!("password for {user}: "))?;
    anyhow::ensure!(
        !password.is_empty(),
        "no password given (use --password-file FILE, or type one)"
    );
    if terminal && read_line("again: ")? != password {
        bail!("the two passwords differ");
    }
    Ok(password)
}

/// Terminal echo off while it lives.
struct EchoOff(libc::termios);

impl EchoOff {
    fn new() -> Option<EchoOff> {
        // SAFETY: a zeroed termios is a valid out-parameter; tcgetattr and
        // tcsetattr only read and write it and the terminal's settings.
        unsafe {
            let mut settings: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut settings) != 0 {
                return None;
            }
            let saved = settings;
            settings.c_lflag &= !libc::ECHO;
            if libc::tcsetattr(0, libc::TCSANOW, &settings) != 0 {
                return None;
            }
            Some(EchoOff(saved))
        }
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        // SAFETY: restores the settings read in `new`.
        unsafe {
            libc::tcsetattr(0, libc::TCSANOW, &self.0);
        }
    }
}
