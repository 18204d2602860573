//! The codec every generated service and client uses: prost's, with
//! smaller per-call buffers than tonic's default.
//!
//! tonic allocates one encode buffer per response stream and one decode
//! buffer per request stream, each of `buffer_size` bytes, growing it when
//! a message needs more. Its default, 8 KiB, is sized for bulk streams;
//! etcd's hot requests and answers (a put, a point range, a txn's header)
//! are a few hundred bytes, so each call allocated 16 KiB and used a tenth
//! of it. Big messages still grow the buffer as before.

use std::marker::PhantomData;

use tonic::codec::{BufferSettings, Codec};
use tonic::codec::{EncodeBuf, Encoder};
use tonic::Status;
use tonic_prost::ProstDecoder;

/// Bytes each call's encode and decode buffers start with: a put of an
/// 8-byte key and a 256-byte value with its gRPC frame, or a point
/// range's answer, fits with room; larger messages grow the buffer.
pub const CODEC_BUFFER_BYTES: usize = 1024;

/// tonic's own threshold for a streaming encoder to yield: encoded bytes
/// gathered before they are handed to the transport (its default).
pub const CODEC_YIELD_BYTES: usize = 32 * 1024;

/// prost's codec with [`CODEC_BUFFER_BYTES`] buffers.
#[derive(Debug, Clone, Copy)]
pub struct SmallBufferCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for SmallBufferCodec<T, U> {
    fn default() -> Self {
        SmallBufferCodec(PhantomData)
    }
}

fn settings() -> BufferSettings {
    BufferSettings::new(CODEC_BUFFER_BYTES, CODEC_YIELD_BYTES)
}

impl<T, U> Codec for SmallBufferCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ReservingEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ReservingEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::new(settings())
    }
}

/// prost's encoder, reserving a message's whole length before writing
/// it. Without the reservation the buffer grows by doubling as the
/// message is written, so a 30 MB Range answer (100,000 key-values) was
/// copied about twice over and its pages faulted in several times: a
/// fifth of that range's CPU.
#[derive(Debug, Clone, Copy)]
pub struct ReservingEncoder<T>(PhantomData<T>);

impl<T: prost::Message> Encoder for ReservingEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.reserve(item.encoded_len());
        item.encode(buf)
            .map_err(|error| Status::internal(format!("encoding a response: {error}")))
    }

    fn buffer_settings(&self) -> BufferSettings {
        settings()
    }
}
