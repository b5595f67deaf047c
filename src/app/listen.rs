//! Every listener bound before anything runs, so a bind error is a startup
//! error, never a task that dies later.

use std::net::SocketAddr;

use tokio::net::TcpListener;

use super::{AppError, Context as _};
use crate::cli::ServeArgs;
use crate::server::GrpcListener;

/// The gRPC listener: `--grpc-uds` when given, else `--grpc-addr`.
pub(crate) async fn bind_grpc(args: &ServeArgs) -> Result<GrpcListener, AppError> {
    let Some(path) = &args.grpc_uds else {
        let tcp = TcpListener::bind(args.grpc_addr)
            .await
            .with_context(|| format!("binding --grpc-addr {}", args.grpc_addr))?;
        return Ok(tcp.into());
    };
    // A socket left by a sluice that did not exit cleanly is replaced; any
    // other file there is an error, never deleted.
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt as _;
        if !meta.file_type().is_socket() {
            return Err(AppError::msg(format!(
                "--grpc-uds {}: exists and is not a socket",
                path.display()
            )));
        }
        std::fs::remove_file(path)
            .with_context(|| format!("removing the stale socket {}", path.display()))?;
    }
    // Bound under a private name, given its mode, then moved into place: no
    // client ever finds the socket with the umask's permissions.
    let staging = path.with_file_name(format!(
        ".{}.{}",
        path.file_name()
            .map_or("sluice.sock".into(), |n| n.to_string_lossy()),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&staging);
    let unix = tokio::net::UnixListener::bind(&staging)
        .with_context(|| format!("binding --grpc-uds {}", path.display()))?;
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(
            &staging,
            std::fs::Permissions::from_mode(args.grpc_uds_mode),
        )
        .with_context(|| format!("--grpc-uds-mode on {}", staging.display()))?;
    }
    std::fs::rename(&staging, path)
        .with_context(|| format!("moving the socket to {}", path.display()))?;
    Ok(GrpcListener::Unix(unix, path.clone()))
}

/// An octal file mode such as `660` or `0600`.
pub(crate) async fn bind_admin(addrs: &[SocketAddr]) -> Result<Vec<TcpListener>, AppError> {
    if addrs.is_empty() {
        return Err(AppError::msg("--admin-addr: at least one address"));
    }
    let mut listeners = Vec::with_capacity(addrs.len());
    for addr in addrs {
        let l = TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding --admin-addr {addr}"))?;
        listeners.push(l);
    }
    Ok(listeners)
}

/// `--reference-metrics-addr` and the mapping file that names what it
/// serves, read and checked before anything runs.
pub(crate) async fn bind_reference_metrics(
    args: &ServeArgs,
) -> Result<
    Option<(
        TcpListener,
        std::sync::Arc<crate::reference_metrics::Mapper>,
    )>,
    AppError,
> {
    let Some(addr) = args.reference_metrics_addr else {
        return Ok(None);
    };
    let mapper = match &args.reference_metrics_mapper {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--reference-metrics-mapper {}", path.display()))?;
            crate::reference_metrics::Mapper::parse(&path.display().to_string(), &text)
                .map_err(|e| AppError::msg(format!("--reference-metrics-mapper {e}")))?
        }
        None => crate::reference_metrics::Mapper::default(),
    };
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding --reference-metrics-addr {addr}"))?;
    Ok(Some((listener, std::sync::Arc::new(mapper))))
}
