//! Requests sent as etcd's gRPC-JSON gateway takes them, for `--gateway`:
//! `POST /v3/kv/put`, `/v3/kv/range` and `/v3/kv/txn` with JSON bodies
//! (keys and values in base64, 64-bit numbers as strings), over HTTP/1.1
//! with keep-alive, one connection per client, as Patroni's and
//! etcd3gw's pooled connections use it. The answers are read only as far
//! as a run needs: the status, and a range's `count`.

use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use etcd_proto::etcdserverpb as pb;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

use crate::workload::Request;

/// One client's connection, or why there is none.
pub enum Client {
    Open {
        sender: SendRequest<Full<Bytes>>,
        host: String,
    },
    Failed(String),
}

impl Client {
    /// Connects to `host:port` (a URL's scheme is ignored).
    pub async fn open(endpoint: &str, timeout: Duration) -> Client {
        let address = endpoint
            .trim()
            .trim_start_matches("http://")
            .trim_start_matches("https://")
            .trim_end_matches('/')
            .to_string();
        let connected = async {
            let stream = crate::dial::connect(&address, b"http/1.1")
                .await
                .map_err(|e| e.to_string())?;
            let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            Ok::<_, String>(sender)
        };
        match tokio::time::timeout(timeout, connected).await {
            Ok(Ok(sender)) => Client::Open { sender, host: address },
            Ok(Err(error)) => Client::Failed(format!("connecting to {address}: {error}")),
            Err(_) => Client::Failed(format!("connecting to {address}: timed out")),
        }
    }

    /// Sends one request; an error is returned as the message it is
    /// counted under (etcd's message, as the gateway's body gives it).
    pub async fn send(&mut self, request: Request) -> Result<(), String> {
        let (sender, host) = match self {
            Client::Open { sender, host } => (sender, host),
            Client::Failed(error) => return Err(error.clone()),
        };
        let (path, body, expect_count) = match &request {
            Request::Put(put) => ("/v3/kv/put", put_json(put), None),
            Request::Range(range, expect) => ("/v3/kv/range", range_json(range), *expect),
            Request::Txn(txn) => ("/v3/kv/txn", txn_json(txn), None),
        };
        let mut http_request = http::Request::post(path)
            .header(http::header::HOST, host.as_str())
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        if let Some(token) = crate::dial::token().and_then(|token| http::HeaderValue::from_str(token).ok()) {
            // etcd's gateway takes the token as the header's whole value.
            http_request.headers_mut().insert(http::header::AUTHORIZATION, token);
        }
        sender.ready().await.map_err(|e| e.to_string())?;
        let response = sender.send_request(http_request).await.map_err(|e| e.to_string())?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        let answer: Option<serde_json::Value> = serde_json::from_slice(&body).ok();
        if !status.is_success() {
            // etcd's message from a JSON error, else the answer's text.
            let message = match answer.as_ref().and_then(|a| a.get("error")).and_then(|m| m.as_str()) {
                Some(message) => message.to_string(),
                None => String::from_utf8_lossy(&body).trim().to_string(),
            };
            return Err(format!("{status}: {message}"));
        }
        let answer = answer.ok_or_else(|| format!("gateway answer is not JSON: {}", String::from_utf8_lossy(&body)))?;
        let Some(expected) = expect_count else {
            return Ok(());
        };
        let count = answer
            .get("count")
            .and_then(|count| count.as_str())
            .and_then(|count| count.parse::<i64>().ok())
            .unwrap_or(0);
        if count != expected {
            return Err(format!("loadgen: the range counted {count} keys, expected {expected}"));
        }
        Ok(())
    }
}

fn base64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

fn put_json(put: &pb::PutRequest) -> String {
    let mut json = serde_json::json!({"key": base64(&put.key), "value": base64(&put.value)});
    if put.lease != 0 {
        json["lease"] = put.lease.to_string().into();
    }
    json.to_string()
}

fn range_json(range: &pb::RangeRequest) -> String {
    let mut json = serde_json::json!({"key": base64(&range.key)});
    if !range.range_end.is_empty() {
        json["range_end"] = base64(&range.range_end).into();
    }
    if range.limit != 0 {
        json["limit"] = range.limit.to_string().into();
    }
    if range.serializable {
        json["serializable"] = true.into();
    }
    if range.count_only {
        json["count_only"] = true.into();
    }
    if range.keys_only {
        json["keys_only"] = true.into();
    }
    json.to_string()
}

fn txn_json(txn: &pb::TxnRequest) -> String {
    let success: Vec<serde_json::Value> = txn
        .success
        .iter()
        .filter_map(|op| match &op.request {
            Some(pb::request_op::Request::RequestPut(put)) => Some(serde_json::json!({
                "request_put": {"key": base64(&put.key), "value": base64(&put.value)}
            })),
            _ => None,
        })
        .collect();
    serde_json::json!({ "success": success }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_written_as_the_gateway_reads_them() {
        let put = pb::PutRequest {
            key: b"foo".to_vec(),
            value: b"bar".to_vec(),
            ..Default::default()
        };
        assert_eq!(put_json(&put), r#"{"key":"Zm9v","value":"YmFy"}"#);
        let range = pb::RangeRequest {
            key: b"a".to_vec(),
            range_end: b"b".to_vec(),
            limit: 5,
            serializable: true,
            ..Default::default()
        };
        assert_eq!(
            range_json(&range),
            r#"{"key":"YQ==","limit":"5","range_end":"Yg==","serializable":true}"#
        );
    }
}
