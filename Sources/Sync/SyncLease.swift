import Foundation
import KeyManager

/// One sync at a time per store: an exclusive `flock` on `sync.lock` in the home.
///
/// The kernel releases it when the holder exits or is killed, so a killed run never blocks the next.
public final class SyncLease {
    private let lock: FileLock

    /// Takes the lease at once, or throws `busy` when another sync holds it, and `config` when the home is
    /// missing or another OS user could write it (no lock file is made there).
    public init(home: StoreLocation) throws {
        try home.checkUsable()
        let path = home.url.appendingPathComponent("sync.lock", isDirectory: false).path
        lock = try FileLock(path: path) { SyncError(.config, "cannot open the sync lock \(path): \($0)") }
        guard try lock.tryLock(cannotLock: { SyncError(.failure, "cannot lock \(path): \($0)") }) else {
            lock.release()
            throw SyncError(.busy, "another `keymgr sync` is running on this store: try again when it has finished")
        }
    }

    /// Gives the lease back (also done when the process ends).
    public func release() {
        lock.release()
    }
}
