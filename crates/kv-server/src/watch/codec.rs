//! The Watch call's codec: requests decoded by prost, responses encoded
//! either whole by prost or from their pieces (`proto::watch_wire`).

use tonic::codec::{Codec, EncodeBuf, Encoder};
use tonic::Status;
use tonic_prost::ProstDecoder;

use crate::proto::etcdserverpb as pb;
use crate::watch::outbox::Outgoing;

#[derive(Default)]
pub struct WatchCodec;

impl Codec for WatchCodec {
    type Encode = Outgoing;
    type Decode = pb::WatchRequest;
    type Encoder = OutgoingEncoder;
    type Decoder = ProstDecoder<pb::WatchRequest>;

    fn encoder(&mut self) -> OutgoingEncoder {
        OutgoingEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::default()
    }
}

pub struct OutgoingEncoder;

impl Encoder for OutgoingEncoder {
    type Item = Outgoing;
    type Error = Status;

    fn encode(&mut self, item: Outgoing, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        match item {
            Outgoing::Message(response) => {
                prost::Message::encode(&response, buf).map_err(|e| Status::internal(e.to_string()))
            }
            Outgoing::Events(events) => {
                events.encode(buf);
                Ok(())
            }
        }
    }
}
