import Foundation
import KeyManager

/// One use of a user's client credentials at a time per user and server, across processes: an exclusive
/// open-file-description lock (`F_OFD_SETLK`) on one byte of `oauth.lock` in the home, the byte chosen by a hash of
/// the user and server. One file serves every user, so no lock file is left behind per user; two users whose hashes
/// collide only wait for each other.
///
/// Held by a refresh (so two processes never spend one refresh token), by each device-grant request and poll, by a
/// token revocation, by a registration (so one user never gets two clients at once) and by a registration read or
/// delete: a Curity-like server rotates the client secret and the
/// registration access token on every registration read, so a secret read before a read must not be sent after it.
/// The kernel releases it when the holder exits or is killed, so a killed refresh never blocks the next.
final class TokenRefreshLock {
    private let lock: FileLock

    /// Waits up to `timeout` seconds for the lock (sleeping between tries, never blocking a thread); `busy` after that.
    /// - Parameter beforeWaiting: called once, when another process holds the lock, before waiting for it.
    static func acquire(home: StoreLocation, userId: String, serverName: String, timeout: TimeInterval = 60,
                        beforeWaiting: () throws -> Void = {}) async throws -> TokenRefreshLock {
        let lock = try TokenRefreshLock(home: home, userId: userId, serverName: serverName)
        let deadline = Date().addingTimeInterval(timeout)
        var waited = false
        while try !lock.lock.tryLock(cannotLock: { SyncError(.failure, "cannot lock the refresh lock: \($0)") }) {
            if !waited {
                waited = true
                do { try beforeWaiting() } catch { lock.release(); throw error }
            }
            guard Date() < deadline else {
                lock.release()
                throw SyncError(.busy, "another keymgr process has been refreshing these tokens for too long: try again")
            }
            try await OwnThreads.sleep(seconds: 0.02)
        }
        return lock
    }

    /// Runs `body` holding the lock of `userId` at `serverName`.
    static func holding<T>(home: StoreLocation, userId: String, serverName: String,
                           _ body: () async throws -> T) async throws -> T {
        let lock = try await acquire(home: home, userId: userId, serverName: serverName)
        defer { lock.release() }
        return try await body()
    }

    /// The one lock file of every user's OAuth credentials, in the home.
    static let fileName = "oauth.lock"

    private init(home: StoreLocation, userId: String, serverName: String) throws {
        try home.checkUsable()
        let path = home.url.appendingPathComponent(Self.fileName, isDirectory: false).path
        lock = try FileLock(path: path, region: .byte(Self.offset(serverName + "\u{0}" + userId))) {
            SyncError(.config, "cannot open the refresh lock \(path): \($0)")
        }
    }

    func release() {
        lock.release()
    }

    /// Where in the lock file the lock of `text` lies: a stable hash of its UTF-8 (FNV-1a, not a security
    /// boundary), kept below 2^62 so it is a valid positive offset.
    static func offset(_ text: String) -> Int {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        return Int(hash & 0x3FFF_FFFF_FFFF_FFFF)
    }
}
