//! `ringlog brokers describe N` and `ringlog brokers purge-orphaned N
//! --older-than AGE`: what a broker keeps in its data directory's
//! `.orphaned/` (partition directories it moved aside instead of deleting:
//! a topic deleted while it was down, a registry that forgot a topic, an
//! earlier topic of the same name), with why and when, and their deletion
//! on request — a broker never deletes them on its own.

use anyhow::{bail, Context};
use protocol::client::Client;
use protocol::codec::orphans::Orphan;
use std::time::Duration;

/// Prints broker `broker`'s addresses and what it keeps in `.orphaned/`.
pub fn describe(client: &Client, broker: u32) -> anyhow::Result<()> {
    let metadata = client.metadata(&[])?;
    let answer = client
        .orphaned(broker, None)
        .with_context(|| format!("asking broker {broker}"))?;
    if let Some(b) = metadata.brokers.iter().find(|b| b.broker_id == broker) {
        let shards: Vec<String> = b
            .shards
            .iter()
            .map(|s| format!("{}:{}", s.host, s.port))
            .collect();
        println!(
            "broker {broker} rack {} shards {}",
            b.rack.as_deref().unwrap_or("-"),
            shards.join(",")
        );
    }
    let bytes: u64 = answer.orphans.iter().map(|o| o.bytes).sum();
    println!(
        "orphaned: {} partition directories, {bytes} bytes (moved aside, never deleted on their own; `ringlog brokers purge-orphaned {broker} --older-than AGE` deletes them)",
        answer.orphans.len()
    );
    if !answer.orphans.is_empty() {
        print_table(&answer.orphans);
    }
    Ok(())
}

/// Deletes what broker `broker` moved aside at least `older_than` ago and
/// says what it deleted and what is left.
pub fn purge(client: &Client, broker: u32, older_than: &str) -> anyhow::Result<()> {
    let age = parse_age(older_than)?;
    let answer = client
        .orphaned(broker, Some(age.as_millis() as u64))
        .with_context(|| format!("asking broker {broker}"))?;
    let bytes: u64 = answer.purged.iter().map(|o| o.bytes).sum();
    println!(
        "purged {} partition directories, {bytes} bytes, moved aside at least {older_than} ago",
        answer.purged.len()
    );
    if !answer.purged.is_empty() {
        print_table(&answer.purged);
    }
    println!(
        "left: {} partition directories, {} bytes",
        answer.orphans.len(),
        answer.orphans.iter().map(|o| o.bytes).sum::<u64>()
    );
    Ok(())
}

fn print_table(orphans: &[Orphan]) {
    println!("topic\tpartition\tbytes\tmoved_at\tpath\twhy");
    for o in orphans {
        println!(
            "{}\t{}\t{}\t{}\t{}\t{}",
            o.topic,
            o.partition,
            o.bytes,
            utc(o.moved_at_ms),
            o.path,
            if o.why.is_empty() {
                "(not recorded: moved aside by an older broker; its log says)"
            } else {
                &o.why
            }
        );
    }
}

/// `ms` since the Unix epoch as a UTC time, `2026-12-07T02:30:00Z`
/// (Howard Hinnant's days-to-civil algorithm).
fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

/// An age: a number and a unit, `s`, `m`, `h` or `d` (`7d`, `12h`, `0s`).
pub fn parse_age(text: &str) -> anyhow::Result<Duration> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let Ok(n) = number.parse::<u64>() else {
        bail!("--older-than {text:?}: an age is a number and a unit (s, m, h or d), e.g. 7d");
    };
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => bail!("--older-than {text:?}: the unit is s, m, h or d (e.g. 7d, 12h)"),
    };
    n.checked_mul(seconds)
        .map(Duration::from_secs)
        .with_context(|| format!("--older-than {text:?} is too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_as_utc() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_796_610_645_000), "2026-12-07T02:30:45Z");
    }

    #[test]
    fn ages_read_with_their_units_and_nonsense_is_refused() {
        assert_eq!(parse_age("7d").unwrap(), Duration::from_secs(7 * 86_400));
        assert_eq!(parse_age("0s").unwrap(), Duration::ZERO);
        assert_eq!(parse_age("90m").unwrap(), Duration::from_secs(5_400));
        for bad in ["", "7", "d", "7w", "-1d", "1.5h", "99999999999999999999d"] {
            assert!(parse_age(bad).is_err(), "{bad}");
        }
    }
}
