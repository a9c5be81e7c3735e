//! HTTP pieces shared by arl's servers and clients: the servers' listener
//! and accept loop with a header read timeout (`server`), bounded request
//! bodies for the servers (`body`), and the clients' builder with HTTPS
//! (`client`).
pub mod body;
pub mod client;
pub mod server;
