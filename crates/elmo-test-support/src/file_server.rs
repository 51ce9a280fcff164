//! A small HTTP/1.1 file server on the loopback interface, for the tests of downloads (elmo-cli's
//! `model_files`): fixed answers per path, a count of the requests, and answers that break off
//! or fail the way a real server's do.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;

/// What the server answers for a path.
#[derive(Debug, Clone)]
pub enum Reply {
    /// `200 OK` with these bytes and their length.
    File(Vec<u8>),
    /// `200 OK` announcing `announced` bytes, of which it sends `body` and then closes.
    BrokenOff {
        /// The bytes sent.
        body: Vec<u8>,
        /// The `Content-Length` announced.
        announced: usize,
    },
    /// This status with an empty body (`404`, `500`, ...).
    Status(u16),
}

/// A running server; stopped when dropped.
pub struct FileServer {
    base: String,
    requests: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FileServer {
    /// Serves `routes` (path such as `/a/options.json`, reply) on a free port of 127.0.0.1;
    /// other paths get `404`.
    ///
    /// # Panics
    /// If no port can be bound.
    pub fn start(routes: Vec<(&str, Reply)>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
        let base = format!("http://{}", listener.local_addr().expect("its address"));
        let routes: Vec<(String, Reply)> = (routes.into_iter())
            .map(|(path, reply)| (path.to_string(), reply))
            .collect();
        let (requests, stop) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (counted, stopped) = (requests.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                counted.fetch_add(1, Ordering::SeqCst);
                // A client that hangs up early is the client's business.
                let _ = answer(stream, &routes);
            }
        });
        Self {
            base,
            requests,
            stop,
            thread: Some(thread),
        }
    }

    /// The URL of `path` on this server.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// How many requests it has answered so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for FileServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accepting thread, which then sees the flag.
        let _ = TcpStream::connect(self.base.trim_start_matches("http://"));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Reads one request's head and writes the reply of its path.
fn answer(stream: TcpStream, routes: &[(String, Reply)]) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header == "\r\n" || header == "\n" {
            break;
        }
    }
    let path = request_line.split_whitespace().nth(1).unwrap_or("/");
    let reply = (routes.iter())
        .find(|(route, _)| route == path)
        .map_or(Reply::Status(404), |(_, reply)| reply.clone());
    let mut stream = stream;
    let head = |status: &str, length: usize| {
        format!("HTTP/1.1 {status}\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n")
    };
    match reply {
        Reply::File(body) => {
            stream.write_all(head("200 OK", body.len()).as_bytes())?;
            stream.write_all(&body)?;
        }
        Reply::BrokenOff { body, announced } => {
            stream.write_all(head("200 OK", announced).as_bytes())?;
            stream.write_all(&body)?;
        }
        Reply::Status(status) => {
            stream.write_all(head(&format!("{status} Status"), 0).as_bytes())?;
        }
    }
    stream.flush()?;
    stream.shutdown(std::net::Shutdown::Both)
}
