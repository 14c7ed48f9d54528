//! JSON log lines, as a web service writes them: what compression is
//! measured on (issue 43, item 8). Fields repeat across lines (keys,
//! levels, services, paths, methods) and vary within them (times,
//! latencies, ids, user agents), so a codec finds what it would in a real
//! log — not the all-alike bytes of a fixed payload, nor random ones.
//! Deterministic: the same seed gives the same lines.

const SERVICES: [&str; 6] = ["checkout", "search", "auth", "catalog", "cart", "payments"];
const PATHS: [&str; 8] = [
    "/api/v1/items",
    "/api/v1/items/{id}",
    "/api/v1/cart",
    "/api/v1/checkout",
    "/api/v2/search",
    "/login",
    "/health",
    "/api/v1/users/{id}/orders",
];
const METHODS: [&str; 4] = ["GET", "GET", "POST", "PUT"];
const LEVELS: [&str; 5] = ["info", "info", "info", "warn", "error"];
const STATUS: [u16; 8] = [200, 200, 200, 200, 201, 304, 404, 500];
const AGENTS: [&str; 4] = [
    "Mozilla/5.0 (X11; Linux x86_64)",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_2)",
    "curl/8.5.0",
    "okhttp/4.12.0",
];

/// `count` lines of about `size` bytes each (at least the fields'; a
/// `msg` field pads them), from `seed`.
pub fn lines(count: usize, size: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut time_ms = 1_700_000_000_000u64;
    (0..count)
        .map(|_| {
            time_ms += next() % 40;
            let r = next();
            let pick = |n: usize, shift: u32| (r >> shift) as usize % n;
            let service = SERVICES[pick(SERVICES.len(), 0)];
            let path = PATHS[pick(PATHS.len(), 8)].replace("{id}", &(next() % 100_000).to_string());
            let mut line = format!(
                "{{\"ts\":{time_ms},\"level\":\"{}\",\"service\":\"{service}\",\"method\":\"{}\",\"path\":\"{path}\",\"status\":{},\"latency_ms\":{:.1},\"user\":\"u{:06}\",\"trace\":\"{:016x}\",\"agent\":\"{}\"",
                LEVELS[pick(LEVELS.len(), 16)],
                METHODS[pick(METHODS.len(), 24)],
                STATUS[pick(STATUS.len(), 32)],
                (next() % 5_000) as f64 / 10.0,
                next() % 250_000,
                next(),
                AGENTS[pick(AGENTS.len(), 40)],
            );
            let pad = size.saturating_sub(line.len() + 11);
            line.push_str(",\"msg\":\"");
            let words = ["request", "served", "from", "cache", "upstream", "ok", "retry"];
            let mut msg = String::new();
            while msg.len() < pad {
                if !msg.is_empty() {
                    msg.push(' ');
                }
                msg.push_str(words[(next() % words.len() as u64) as usize]);
            }
            msg.truncate(pad);
            line.push_str(&msg);
            line.push_str("\"}");
            line.into_bytes()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_json_of_about_the_size_asked_and_the_same_for_a_seed() {
        let a = lines(100, 300, 7);
        assert_eq!(a, lines(100, 300, 7));
        assert_ne!(a, lines(100, 300, 8));
        for line in &a {
            let text = std::str::from_utf8(line).unwrap();
            assert!(
                text.starts_with("{\"ts\":") && text.ends_with("\"}"),
                "{text}"
            );
            assert!((250..=320).contains(&line.len()), "{}: {text}", line.len());
            let parsed: serde_json::Value = serde_json::from_slice(line).unwrap();
            assert!(parsed["status"].is_u64());
        }
    }
}
