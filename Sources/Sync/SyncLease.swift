import Foundation
import KeyManager

/// One sync at a time per store: an exclusive `flock` on `sync.lock` in the home.
///
/// The kernel releases it when the holder exits or is killed, so a killed run never blocks the next.
public final class SyncLease {
    private var descriptor: Int32

    /// Takes the lease at once, or throws `busy` when another sync holds it, and `config` when the home is
    /// missing or another OS user could write it (no lock file is made there).
    public init(home: StoreLocation) throws {
        try home.checkUsable()
        let path = home.url.appendingPathComponent("sync.lock").path
        descriptor = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw KeyManagerError(.config, "cannot open the sync lock \(path): \(String(cString: strerror(errno)))")
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let reason = errno
            close(descriptor)
            descriptor = -1
            if reason == EWOULDBLOCK {
                throw KeyManagerError(.busy, "another `keymgr sync` is running on this store: try again when it has finished")
            }
            throw KeyManagerError(.failure, "cannot lock \(path): \(String(cString: strerror(reason)))")
        }
    }

    /// Gives the lease back (also done when the process ends).
    public func release() {
        guard descriptor >= 0 else { return }
        flock(descriptor, LOCK_UN)
        close(descriptor)
        descriptor = -1
    }

    deinit { release() }
}
