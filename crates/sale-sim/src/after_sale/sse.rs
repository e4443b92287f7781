//! Server-sent events as the order stream sends them: read chunk by chunk, events out as
//! soon as their blank line has arrived.

/// One event: its `event:` name (`message` when it has none) and its `data:` lines joined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub name: String,
    pub data: String,
}

/// Collects the stream's bytes and hands out each complete event. Chunks may split a line,
/// or a character, anywhere.
#[derive(Debug, Default)]
pub struct Parser {
    pending: Vec<u8>,
}

impl Parser {
    /// The events that `chunk` completed, in order. Comment lines (`: still waiting`) and
    /// blocks without data are no events.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<Event> {
        // CRLF and LF end lines alike; a lone CR does too in the spec, but no server of
        // ours sends one.
        self.pending
            .extend(chunk.iter().copied().filter(|&b| b != b'\r'));
        let mut events = Vec::new();
        while let Some(end) = self.pending.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = self.pending.drain(..end + 2).collect();
            if let Some(event) = parse_block(&String::from_utf8_lossy(&block[..end])) {
                events.push(event);
            }
        }
        events
    }
}

fn parse_block(block: &str) -> Option<Event> {
    let mut name = None;
    let mut data: Option<String> = None;
    for line in block.lines() {
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => name = Some(value.to_owned()),
            "data" => match &mut data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => data = Some(value.to_owned()),
            },
            _ => {}
        }
    }
    Some(Event {
        name: name.unwrap_or_else(|| "message".to_owned()),
        data: data?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(data: &str) -> Event {
        Event {
            name: "status".into(),
            data: data.into(),
        }
    }

    #[test]
    fn an_event_comes_out_once_its_blank_line_arrives() {
        let mut parser = Parser::default();
        assert_eq!(parser.feed(b"event: status\ndata: {\"status\":"), vec![]);
        assert_eq!(parser.feed(b"\"confirmed\"}\n"), vec![]);
        assert_eq!(
            parser.feed(b"\nevent: status\ndata: {}\n\n"),
            vec![status("{\"status\":\"confirmed\"}"), status("{}")]
        );
    }

    #[test]
    fn comments_are_skipped_and_crlf_is_a_line_end() {
        let mut parser = Parser::default();
        let events = parser.feed(b": still waiting\n\nevent: status\r\ndata: {}\r\n\r\n");
        assert_eq!(events, vec![status("{}")]);
    }

    #[test]
    fn data_lines_are_joined_and_an_unnamed_event_is_a_message() {
        let mut parser = Parser::default();
        assert_eq!(
            parser.feed(b"data: a\ndata:b\n\n"),
            vec![Event {
                name: "message".into(),
                data: "a\nb".into()
            }]
        );
    }

    #[test]
    fn a_character_split_across_chunks_survives() {
        let mut parser = Parser::default();
        let text = "event: status\ndata: é\n\n".as_bytes();
        let split = text.iter().position(|&b| b == 0xc3).unwrap() + 1;
        assert_eq!(parser.feed(&text[..split]), vec![]);
        assert_eq!(parser.feed(&text[split..]), vec![status("é")]);
    }
}
