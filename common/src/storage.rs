//! Object storage: a local directory (embedded default) or any S3-compatible store.
//!
//! Both backends take the same keys and write the same headers (derived from the key by
//! [`crate::keys::headers_for_key`]), so a CDN may pull from the bucket or from `/cdn`.

use std::path::{Path, PathBuf};
use std::pin::Pin;

use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::primitives::ByteStream as S3ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt, TryStreamExt};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
use tokio_util::io::ReaderStream;

use crate::config::StorageConfig;
use crate::keys::{ObjectHeaders, headers_for_key};

/// A stream of object bytes, as served to HTTP clients.
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, std::io::Error>> + Send>>;

/// S3 parts must be at least 5 MiB; 8 MiB keeps upload memory flat and small.
const PART_SIZE: usize = 8 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("object {0} not found")]
    NotFound(String),
    #[error("invalid object key {0:?}")]
    InvalidKey(String),
    #[error("object store I/O on {key}: {source}")]
    Io { key: String, source: std::io::Error },
    #[error("S3 {op} {key}: {message}")]
    S3 {
        op: &'static str,
        key: String,
        message: String,
    },
    /// The byte stream handed to `put_stream` failed (client went away, limit hit, …).
    #[error("upload stream: {0}")]
    Source(std::io::Error),
}

impl StorageError {
    /// Worth retrying with backoff: the store may answer next time.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Io { .. } | Self::S3 { .. })
    }
}

/// Size and headers of a stored object.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectMeta {
    pub size: u64,
    pub headers: ObjectHeaders,
}

#[derive(Clone)]
pub enum Storage {
    Local(LocalStore),
    S3(S3Store),
}

#[derive(Clone)]
pub struct LocalStore {
    root: PathBuf,
}

#[derive(Clone)]
pub struct S3Store {
    client: aws_sdk_s3::Client,
    bucket: String,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Local(l) => write!(f, "local directory {}", l.root.display()),
            Self::S3(s) => write!(f, "S3 bucket {}", s.bucket),
        }
    }
}

impl Storage {
    pub async fn from_config(config: &StorageConfig, data_dir: &Path) -> anyhow::Result<Self> {
        if config.s3_bucket.is_empty() {
            let root = if config.local_dir.is_empty() {
                data_dir.join("objects")
            } else {
                PathBuf::from(&config.local_dir)
            };
            return Ok(Self::local(root).await?);
        }
        let shared = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new(config.s3_region.clone()))
            .load()
            .await;
        let mut builder = aws_sdk_s3::config::Builder::from(&shared)
            .force_path_style(config.s3_path_style)
            // Garage (and other non-AWS stores) reject the default streaming checksums.
            .request_checksum_calculation(
                aws_sdk_s3::config::RequestChecksumCalculation::WhenRequired,
            )
            .response_checksum_validation(
                aws_sdk_s3::config::ResponseChecksumValidation::WhenRequired,
            );
        if !config.s3_endpoint.is_empty() {
            builder = builder.endpoint_url(&config.s3_endpoint);
        }
        Ok(Self::S3(S3Store {
            client: aws_sdk_s3::Client::from_conf(builder.build()),
            bucket: config.s3_bucket.clone(),
        }))
    }

    pub async fn local(root: PathBuf) -> Result<Self, StorageError> {
        tokio::fs::create_dir_all(root.join(".tmp"))
            .await
            .map_err(|source| StorageError::Io {
                key: root.display().to_string(),
                source,
            })?;
        Ok(Self::Local(LocalStore { root }))
    }

    /// Readiness: the store answers.
    pub async fn check(&self) -> Result<(), StorageError> {
        match self {
            Self::Local(l) => tokio::fs::metadata(&l.root)
                .await
                .map(|_| ())
                .map_err(|source| StorageError::Io {
                    key: l.root.display().to_string(),
                    source,
                }),
            Self::S3(s) => s
                .client
                .head_bucket()
                .bucket(&s.bucket)
                .send()
                .await
                .map(|_| ())
                .map_err(|e| s3_error("HeadBucket", "", e)),
        }
    }

    pub async fn head(&self, key: &str) -> Result<Option<ObjectMeta>, StorageError> {
        let headers = headers_for_key(key);
        match self {
            Self::Local(l) => match tokio::fs::metadata(l.path(key)?).await {
                Ok(m) if m.is_file() => Ok(Some(ObjectMeta {
                    size: m.len(),
                    headers,
                })),
                Ok(_) => Ok(None),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(source) => Err(StorageError::Io {
                    key: key.into(),
                    source,
                }),
            },
            Self::S3(s) => match s
                .client
                .head_object()
                .bucket(&s.bucket)
                .key(key)
                .send()
                .await
            {
                Ok(out) => Ok(Some(ObjectMeta {
                    size: out.content_length().unwrap_or(0) as u64,
                    headers,
                })),
                Err(e) if is_s3_not_found(&e) => Ok(None),
                Err(e) => Err(s3_error("HeadObject", key, e)),
            },
        }
    }

    pub async fn put_bytes(&self, key: &str, bytes: Bytes) -> Result<(), StorageError> {
        let stream = futures::stream::once(async move { Ok::<_, std::io::Error>(bytes) });
        self.put_stream(key, stream).await.map(|_| ())
    }

    pub async fn put_file(&self, key: &str, path: &Path) -> Result<u64, StorageError> {
        let file = tokio::fs::File::open(path)
            .await
            .map_err(|source| StorageError::Io {
                key: path.display().to_string(),
                source,
            })?;
        self.put_stream(key, ReaderStream::with_capacity(file, 256 * 1024))
            .await
    }

    /// Stores a stream under `key`, holding at most one part in memory. The object appears
    /// only when the whole stream has been stored: a failed stream leaves nothing behind.
    pub async fn put_stream<S>(&self, key: &str, stream: S) -> Result<u64, StorageError>
    where
        S: Stream<Item = Result<Bytes, std::io::Error>> + Send,
    {
        match self {
            Self::Local(l) => l.put_stream(key, stream).await,
            Self::S3(s) => s.put_stream(key, stream).await,
        }
    }

    /// Copies an object into a local file (the worker's download of a package).
    pub async fn get_to_file(&self, key: &str, dest: &Path) -> Result<u64, StorageError> {
        let (_, mut stream) = self.open(key, None).await?;
        let io_err = |source| StorageError::Io {
            key: dest.display().to_string(),
            source,
        };
        let mut file = tokio::fs::File::create(dest).await.map_err(io_err)?;
        let mut written = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|source| StorageError::Io {
                key: key.into(),
                source,
            })?;
            written += chunk.len() as u64;
            file.write_all(&chunk).await.map_err(io_err)?;
        }
        file.flush().await.map_err(io_err)?;
        Ok(written)
    }

    pub async fn get_bytes(&self, key: &str) -> Result<Bytes, StorageError> {
        let (_, stream) = self.open(key, None).await?;
        let chunks: Vec<Bytes> = stream
            .try_collect()
            .await
            .map_err(|source| StorageError::Io {
                key: key.into(),
                source,
            })?;
        Ok(chunks.concat().into())
    }

    /// Opens an object for reading, optionally only the inclusive byte range `(first, last)`.
    pub async fn open(
        &self,
        key: &str,
        range: Option<(u64, u64)>,
    ) -> Result<(ObjectMeta, ByteStream), StorageError> {
        let headers = headers_for_key(key);
        match self {
            Self::Local(l) => {
                let path = l.path(key)?;
                let io_err = |source: std::io::Error| {
                    if source.kind() == std::io::ErrorKind::NotFound {
                        StorageError::NotFound(key.into())
                    } else {
                        StorageError::Io {
                            key: key.into(),
                            source,
                        }
                    }
                };
                let mut file = tokio::fs::File::open(&path).await.map_err(io_err)?;
                let size = file.metadata().await.map_err(io_err)?.len();
                let meta = ObjectMeta { size, headers };
                let stream: ByteStream = match range {
                    None => Box::pin(ReaderStream::with_capacity(file, 256 * 1024)),
                    Some((first, last)) => {
                        file.seek(std::io::SeekFrom::Start(first))
                            .await
                            .map_err(io_err)?;
                        Box::pin(ReaderStream::with_capacity(
                            file.take(last - first + 1),
                            256 * 1024,
                        ))
                    }
                };
                Ok((meta, stream))
            }
            Self::S3(s) => {
                let mut req = s.client.get_object().bucket(&s.bucket).key(key);
                if let Some((first, last)) = range {
                    req = req.range(format!("bytes={first}-{last}"));
                }
                let out = match req.send().await {
                    Ok(out) => out,
                    Err(e) if is_s3_not_found(&e) => {
                        return Err(StorageError::NotFound(key.into()));
                    }
                    Err(e) => return Err(s3_error("GetObject", key, e)),
                };
                let size = match (range, out.content_range()) {
                    (Some(_), Some(cr)) => cr
                        .rsplit('/')
                        .next()
                        .and_then(|total| total.parse().ok())
                        .unwrap_or(0),
                    _ => out.content_length().unwrap_or(0) as u64,
                };
                let reader = out.body.into_async_read();
                Ok((
                    ObjectMeta { size, headers },
                    Box::pin(ReaderStream::with_capacity(reader, 256 * 1024)),
                ))
            }
        }
    }

    pub async fn delete(&self, key: &str) -> Result<(), StorageError> {
        match self {
            Self::Local(l) => match tokio::fs::remove_file(l.path(key)?).await {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(source) => Err(StorageError::Io {
                    key: key.into(),
                    source,
                }),
            },
            Self::S3(s) => s
                .client
                .delete_object()
                .bucket(&s.bucket)
                .key(key)
                .send()
                .await
                .map(|_| ())
                .map_err(|e| s3_error("DeleteObject", key, e)),
        }
    }
}

impl LocalStore {
    /// Maps a key to a path under the root. Keys are ours, but a key is still checked so
    /// that no caller (e.g. the CDN route with a hostile path) can reach outside the root.
    fn path(&self, key: &str) -> Result<PathBuf, StorageError> {
        if !crate::keys::is_safe_key(key) {
            return Err(StorageError::InvalidKey(key.into()));
        }
        Ok(self.root.join(key))
    }

    async fn put_stream<S>(&self, key: &str, stream: S) -> Result<u64, StorageError>
    where
        S: Stream<Item = Result<Bytes, std::io::Error>> + Send,
    {
        let dest = self.path(key)?;
        let io_err = |source| StorageError::Io {
            key: key.into(),
            source,
        };
        if let Some(parent) = dest.parent() {
            tokio::fs::create_dir_all(parent).await.map_err(io_err)?;
        }
        // Write beside the store, then rename: readers never see a half-written object.
        let tmp = self
            .root
            .join(".tmp")
            .join(format!("{}.part", uuid::Uuid::new_v4()));
        let result = async {
            let mut file = tokio::fs::File::create(&tmp).await.map_err(io_err)?;
            let mut written = 0u64;
            let mut stream = std::pin::pin!(stream);
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(StorageError::Source)?;
                written += chunk.len() as u64;
                file.write_all(&chunk).await.map_err(io_err)?;
            }
            file.sync_all().await.map_err(io_err)?;
            tokio::fs::rename(&tmp, &dest).await.map_err(io_err)?;
            Ok(written)
        }
        .await;
        if result.is_err() {
            let _ = tokio::fs::remove_file(&tmp).await;
        }
        result
    }
}

impl S3Store {
    async fn put_stream<S>(&self, key: &str, stream: S) -> Result<u64, StorageError>
    where
        S: Stream<Item = Result<Bytes, std::io::Error>> + Send,
    {
        let headers = headers_for_key(key);
        let mut stream = std::pin::pin!(stream);
        let mut buffer = BytesMut::with_capacity(PART_SIZE);
        let mut total = 0u64;
        // Fill the first part; a small object is one PutObject.
        let mut ended = fill_part(&mut stream, &mut buffer, &mut total).await?;
        if ended {
            let body = buffer.freeze();
            self.client
                .put_object()
                .bucket(&self.bucket)
                .key(key)
                .content_type(&headers.content_type)
                .set_content_encoding(headers.content_encoding.clone())
                .cache_control(&headers.cache_control)
                .content_length(body.len() as i64)
                .body(S3ByteStream::from(body))
                .send()
                .await
                .map_err(|e| s3_error("PutObject", key, e))?;
            return Ok(total);
        }
        let upload = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .content_type(&headers.content_type)
            .set_content_encoding(headers.content_encoding.clone())
            .cache_control(&headers.cache_control)
            .send()
            .await
            .map_err(|e| s3_error("CreateMultipartUpload", key, e))?;
        let upload_id = upload.upload_id().unwrap_or_default().to_string();
        let result: Result<Vec<CompletedPart>, StorageError> = async {
            let mut parts = Vec::new();
            loop {
                let part_number = parts.len() as i32 + 1;
                let body = std::mem::replace(&mut buffer, BytesMut::with_capacity(PART_SIZE));
                let out = self
                    .client
                    .upload_part()
                    .bucket(&self.bucket)
                    .key(key)
                    .upload_id(&upload_id)
                    .part_number(part_number)
                    .content_length(body.len() as i64)
                    .body(S3ByteStream::from(body.freeze()))
                    .send()
                    .await
                    .map_err(|e| s3_error("UploadPart", key, e))?;
                parts.push(
                    CompletedPart::builder()
                        .part_number(part_number)
                        .set_e_tag(out.e_tag().map(str::to_string))
                        .build(),
                );
                if ended {
                    return Ok(parts);
                }
                ended = fill_part(&mut stream, &mut buffer, &mut total).await?;
                if buffer.is_empty() {
                    return Ok(parts);
                }
            }
        }
        .await;
        match result {
            Ok(parts) => {
                self.client
                    .complete_multipart_upload()
                    .bucket(&self.bucket)
                    .key(key)
                    .upload_id(&upload_id)
                    .multipart_upload(
                        CompletedMultipartUpload::builder()
                            .set_parts(Some(parts))
                            .build(),
                    )
                    .send()
                    .await
                    .map_err(|e| s3_error("CompleteMultipartUpload", key, e))?;
                Ok(total)
            }
            Err(e) => {
                // Leave no orphaned parts behind (they cost money and never become an object).
                let _ = self
                    .client
                    .abort_multipart_upload()
                    .bucket(&self.bucket)
                    .key(key)
                    .upload_id(&upload_id)
                    .send()
                    .await;
                Err(e)
            }
        }
    }
}

/// Reads from `stream` until `buffer` holds a part; returns true when the stream ended.
async fn fill_part<S>(
    stream: &mut Pin<&mut S>,
    buffer: &mut BytesMut,
    total: &mut u64,
) -> Result<bool, StorageError>
where
    S: Stream<Item = Result<Bytes, std::io::Error>>,
{
    while buffer.len() < PART_SIZE {
        match stream.next().await {
            Some(chunk) => {
                let chunk = chunk.map_err(StorageError::Source)?;
                *total += chunk.len() as u64;
                buffer.extend_from_slice(&chunk);
            }
            None => return Ok(true),
        }
    }
    Ok(false)
}

fn is_s3_not_found<E>(err: &aws_sdk_s3::error::SdkError<E, HttpResponse>) -> bool {
    match err {
        aws_sdk_s3::error::SdkError::ServiceError(service) => {
            service.raw().status().as_u16() == 404
        }
        _ => false,
    }
}

fn s3_error<E, R>(
    op: &'static str,
    key: &str,
    err: aws_sdk_s3::error::SdkError<E, R>,
) -> StorageError
where
    E: aws_sdk_s3::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let message = match &err {
        aws_sdk_s3::error::SdkError::ServiceError(s) => format!(
            "{}: {}",
            s.err().code().unwrap_or("error"),
            s.err().message().unwrap_or("no message")
        ),
        other => aws_sdk_s3::error::DisplayErrorContext(other).to_string(),
    };
    StorageError::S3 {
        op,
        key: key.into(),
        message,
    }
}
