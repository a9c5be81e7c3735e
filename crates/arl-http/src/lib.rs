//! HTTP pieces shared by arl's servers and clients: bounded request bodies for
//! the servers (`body`), and the clients' builder with HTTPS (`client`).
pub mod body;
pub mod client;
