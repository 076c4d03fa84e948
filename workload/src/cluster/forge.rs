//! Test-only: forging what a server says to a client. A [`Link`](super::proxy::Link) given a
//! [`Rule`] parses the server's side of the NATS protocol into [`Frame`]s and hands each to
//! the rule, which passes it on, changes it, drops it or adds frames after it. Tests use it
//! to make answers that a real server gives only through defects nobody can trigger on
//! demand (an ack naming a wrong sequence that arrives after a rewind, an older message
//! delivered again inside one consumer). The workload itself never installs a rule.

use bytes::{Buf, BytesMut};
use std::sync::{Arc, Mutex};

/// One unit of the server-to-client protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// `MSG` or `HMSG`: a message for one subscription.
    Msg { subject: String, sid: String, reply: Option<String>, headers: Option<Vec<u8>>, payload: Vec<u8> },
    /// Any other line (`INFO`, `PING`, `+OK`, `-ERR` ...), without its CRLF.
    Line(Vec<u8>),
}

/// Decides what the client gets for each frame from the server.
pub type Rule = Arc<Mutex<dyn FnMut(Frame) -> Vec<Frame> + Send>>;

impl Frame {
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Frame::Line(line) => {
                out.extend_from_slice(line);
                out.extend_from_slice(b"\r\n");
            }
            Frame::Msg { subject, sid, reply, headers, payload } => {
                let reply = reply.as_deref().map(|r| format!(" {r}")).unwrap_or_default();
                match headers {
                    None => out.extend_from_slice(format!("MSG {subject} {sid}{reply} {}\r\n", payload.len()).as_bytes()),
                    Some(h) => out.extend_from_slice(format!("HMSG {subject} {sid}{reply} {} {}\r\n", h.len(), h.len() + payload.len()).as_bytes()),
                }
                if let Some(h) = headers {
                    out.extend_from_slice(h);
                }
                out.extend_from_slice(payload);
                out.extend_from_slice(b"\r\n");
            }
        }
    }
}

/// Splits a byte stream into frames as they complete.
#[derive(Default)]
pub struct Parser {
    buf: BytesMut,
}

impl Parser {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete frame, if the buffer holds one. A line that is not the protocol
    /// (it cannot be parsed as MSG/HMSG) is passed on as a line.
    pub fn next_frame(&mut self) -> Option<Frame> {
        let eol = self.buf.windows(2).position(|w| w == b"\r\n")?;
        let line = &self.buf[..eol];
        let op = line.split(|b| *b == b' ').next().unwrap_or_default().to_ascii_uppercase();
        let sizes = match op.as_slice() {
            b"MSG" | b"HMSG" => msg_sizes(line, op == b"HMSG"),
            _ => None,
        };
        let Some((subject, sid, reply, hdr_len, total)) = sizes else {
            let line = self.buf.split_to(eol).to_vec();
            self.buf.advance(2);
            return Some(Frame::Line(line));
        };
        if self.buf.len() < eol + 2 + total + 2 {
            return None; // the message body has not all arrived yet
        }
        self.buf.advance(eol + 2);
        let body = self.buf.split_to(total).to_vec();
        self.buf.advance(2);
        let headers = hdr_len.map(|h| body[..h].to_vec());
        let payload = body[hdr_len.unwrap_or(0)..].to_vec();
        Some(Frame::Msg { subject, sid, reply, headers, payload })
    }
}

type MsgLine = (String, String, Option<String>, Option<usize>, usize);

/// `MSG <subject> <sid> [reply] <bytes>` or `HMSG <subject> <sid> [reply] <hdr> <total>`.
fn msg_sizes(line: &[u8], with_headers: bool) -> Option<MsgLine> {
    let text = std::str::from_utf8(line).ok()?;
    let args: Vec<&str> = text.split_ascii_whitespace().skip(1).collect();
    let (fixed, sizes) = if with_headers { (args.len().checked_sub(2)?, 2) } else { (args.len().checked_sub(1)?, 1) };
    let reply = match fixed {
        2 => None,
        3 => Some(args[2].to_string()),
        _ => return None,
    };
    let nums: Vec<usize> = args[fixed..fixed + sizes].iter().map(|n| n.parse().ok()).collect::<Option<_>>()?;
    let (hdr, total) = if with_headers { (Some(nums[0]), nums[1]) } else { (None, nums[0]) };
    Some((args[0].to_string(), args[1].to_string(), reply, hdr, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_across_any_split() {
        let mut wire = Vec::new();
        let frames = vec![
            Frame::Line(b"INFO {\"server_id\":\"x\"}".to_vec()),
            Frame::Msg { subject: "_INBOX.a".into(), sid: "3".into(), reply: None, headers: None, payload: br#"{"stream":"S","seq":7}"#.to_vec() },
            Frame::Msg {
                subject: "_INBOX.b".into(),
                sid: "9".into(),
                reply: Some("$JS.ACK.S.C.1.7.7.0.0".into()),
                headers: Some(b"NATS/1.0\r\nNats-Msg-Id: r-7\r\n\r\n".to_vec()),
                payload: b"pay\r\nload".to_vec(),
            },
            Frame::Line(b"PING".to_vec()),
        ];
        frames.iter().for_each(|f| f.encode(&mut wire));
        for cut in 0..wire.len() {
            let mut p = Parser::default();
            let mut got = Vec::new();
            for part in [&wire[..cut], &wire[cut..]] {
                p.push(part);
                while let Some(f) = p.next_frame() {
                    got.push(f);
                }
            }
            assert_eq!(got, frames, "split at {cut}");
        }
    }
}
