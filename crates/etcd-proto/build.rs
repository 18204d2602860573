//! Compiles etcd's protos and this project's peer protos from `proto/` with
//! protox, a pure-Rust protobuf compiler, so the build needs nothing but
//! cargo. Beside the generated code it writes:
//! - `descriptors.bin`: the encoded descriptor set of every proto, which
//!   the gateway's JSON mapping reads messages' fields from;
//! - `gateway_rules.rs`: the route table of etcd's gRPC-JSON gateway,
//!   read from the protos' `google.api.http` options, so the gateway
//!   serves exactly the rules the protos declare.

use std::fmt::Write as _;
use std::path::PathBuf;

use prost_reflect::{DescriptorPool, Value};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../proto");
    let files = [
        "etcdserverpb/rpc.proto",
        "mvccpb/kv.proto",
        "authpb/auth.proto",
        "kvserverpb/kvserver.proto",
        "v3lockpb/v3lock.proto",
        "v3electionpb/v3election.proto",
    ];
    let mut compiler = protox::Compiler::new([proto_root])?;
    compiler.include_imports(true).open_files(files)?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("descriptors.bin"), compiler.encode_file_descriptor_set())?;
    std::fs::write(
        out.join("gateway_rules.rs"),
        gateway_rules(&compiler.descriptor_pool())?,
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .codec_path("crate::codec::SmallBufferCodec")
        .compile_fds(compiler.file_descriptor_set())?;
    println!("cargo:rerun-if-changed={proto_root}");
    Ok(())
}

/// The POST paths of one method's `google.api.http` option: the rule's
/// own and its additional bindings'.
fn posts(rule: &prost_reflect::DynamicMessage) -> Vec<String> {
    let mut paths = Vec::new();
    if let Some(Value::String(post)) = rule.get_field_by_name("post").as_deref() {
        if !post.is_empty() {
            paths.push(post.clone());
        }
    }
    if let Some(Value::List(more)) = rule.get_field_by_name("additional_bindings").as_deref() {
        for binding in more {
            if let Value::Message(binding) = binding {
                paths.extend(posts(binding));
            }
        }
    }
    paths
}

fn gateway_rules(pool: &DescriptorPool) -> Result<String, Box<dyn std::error::Error>> {
    let http = pool
        .get_extension_by_name("google.api.http")
        .ok_or("google/api/annotations.proto declares google.api.http")?;
    let mut table = String::from("&[\n");
    for service in pool.services() {
        for method in service.methods() {
            let options = method.options();
            if !options.has_extension(&http) {
                continue;
            }
            let Value::Message(rule) = options.get_extension(&http).into_owned() else {
                continue;
            };
            for path in posts(&rule) {
                writeln!(
                    table,
                    "    HttpRule {{ path: {path:?}, grpc_path: \"/{}/{}\", input: {:?}, output: {:?}, \
                     client_streaming: {}, server_streaming: {} }},",
                    service.full_name(),
                    method.name(),
                    method.input().full_name(),
                    method.output().full_name(),
                    method.is_client_streaming(),
                    method.is_server_streaming(),
                )?;
            }
        }
    }
    table.push(']');
    Ok(table)
}
