//! The protocols a listener can speak, and how a connection gets its session.

use crate::context::{ServerContext, Session};

/// Makes the session of a new connection.
pub type SessionFactory = fn(&ServerContext) -> Box<dyn Session>;

/// A listener's wire protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// memcached text and meta.
    Memcache,
    /// Redis RESP2/RESP3.
    Resp,
}

impl Protocol {
    /// Lower-case name for logs.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Memcache => "memcache",
            Protocol::Resp => "resp",
        }
    }

    /// What the reference server answers a connection over its limit before closing it.
    pub fn too_many_connections(self) -> &'static [u8] {
        match self {
            Protocol::Memcache => b"ERROR Too many open connections\r\n",
            Protocol::Resp => b"-ERR max number of clients reached\r\n",
        }
    }
}

/// The session factory of each protocol.
#[derive(Clone, Copy, Debug)]
pub struct Sessions {
    /// For memcached connections.
    pub memcache: SessionFactory,
    /// For RESP connections.
    pub resp: SessionFactory,
}

impl Sessions {
    /// A session for a new connection speaking `protocol`.
    pub fn create(&self, protocol: Protocol, ctx: &ServerContext) -> Box<dyn Session> {
        match protocol {
            Protocol::Memcache => (self.memcache)(ctx),
            Protocol::Resp => (self.resp)(ctx),
        }
    }
}

fn resp_session(ctx: &ServerContext) -> Box<dyn Session> {
    Box::new(crate::resp_exec::RespSession::new(ctx.next_client_id()))
}

/// The sessions built into this crate.
pub fn builtin() -> Sessions {
    Sessions {
        memcache: crate::memcache_exec::MemcacheSession::factory,
        resp: resp_session,
    }
}
