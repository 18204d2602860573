//! Compiles etcd's protos and this project's peer protos from `proto/` with
//! protox, a pure-Rust protobuf compiler, so the build needs nothing but
//! cargo.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../proto");
    let files = [
        "etcdserverpb/rpc.proto",
        "mvccpb/kv.proto",
        "authpb/auth.proto",
        "kvserverpb/kvserver.proto",
    ];
    let descriptors = protox::compile(files, [proto_root])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .codec_path("crate::codec::SmallBufferCodec")
        .compile_fds(descriptors)?;
    for file in files {
        println!("cargo:rerun-if-changed={proto_root}/{file}");
    }
    Ok(())
}
