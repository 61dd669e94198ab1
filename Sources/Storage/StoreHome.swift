import Foundation

/// The directory that holds a keymgr store: `keymgr.db`, the master key (unless it comes from elsewhere)
/// and the sync lock. Mode 0700, owned by the user running keymgr (or root; for root, also the agent's account,
/// `AgentAccount`).
package struct StoreHome: Sendable, Equatable {
    /// The home directory.
    package let url: URL

    package init(url: URL) {
        self.url = url.standardizedFileURL
    }

    /// The home named by `--home`, else `$KEYMGR_HOME`, else `${XDG_DATA_HOME:-~/.local/share}/keymgr`.
    package static func resolve(explicit: String?, environment: [String: String] = ProcessInfo.processInfo.environment) -> StoreHome {
        if let explicit, !explicit.isEmpty { return StoreHome(url: URL(fileURLWithPath: explicit, isDirectory: true)) }
        if let fromEnvironment = environment["KEYMGR_HOME"], !fromEnvironment.isEmpty {
            return StoreHome(url: URL(fileURLWithPath: fromEnvironment, isDirectory: true))
        }
        let dataHome: URL
        if let xdg = environment["XDG_DATA_HOME"], xdg.hasPrefix("/") {
            dataHome = URL(fileURLWithPath: xdg, isDirectory: true)
        } else {
            let userHome = environment["HOME"].map { URL(fileURLWithPath: $0, isDirectory: true) }
                ?? FileManager.default.homeDirectoryForCurrentUser
            dataHome = userHome.appendingPathComponent(".local/share", isDirectory: true)
        }
        return StoreHome(url: dataHome.appendingPathComponent("keymgr", isDirectory: true))
    }

    /// The SQLite database file.
    package var databaseURL: URL { url.appendingPathComponent("keymgr.db", isDirectory: false) }

    /// The writers' queue: an exclusive `flock` on this file is held across every write transaction (see
    /// `Store.write`). Made 0600 by the first write; holds no data, so it may be deleted while no keymgr runs.
    package var writerLockURL: URL { url.appendingPathComponent("keymgr.db-lock") }

    /// Whether a database exists in this home.
    package var hasDatabase: Bool { FileManager.default.fileExists(atPath: databaseURL.path) }

    /// Makes sure the home exists with mode 0700 (creating it if `create`), and that no other OS user can write it.
    package func prepare(create: Bool) throws {
        var info = stat()
        if lstat(url.path, &info) != 0 {
            guard create else {
                throw StorageError(.notInitialized, "no keymgr store at \(url.path): run `keymgr init` first (or pass --home)")
            }
            let parent = url.deletingLastPathComponent()
            try FileManager.default.createDirectory(at: parent, withIntermediateDirectories: true)
            guard mkdir(url.path, 0o700) == 0 || errno == EEXIST else {
                throw StorageError(.failure, "cannot create \(url.path): \(String(cString: strerror(errno)))")
            }
            guard lstat(url.path, &info) == 0 else {
                throw StorageError(.failure, "cannot read \(url.path): \(String(cString: strerror(errno)))")
            }
        }
        guard (info.st_mode & S_IFMT) == S_IFDIR else {
            throw StorageError(.insecureHome, "\(url.path) is not a directory: point --home or KEYMGR_HOME at a directory")
        }
        try Self.checkNotWritableByOthers(path: url.path, info: info, kind: "home directory", fix: "chmod 700")
    }

    /// Refuses a file or directory that another OS user could write: owned by someone else, or group/world-writable.
    static func checkNotWritableByOthers(path: String, info: stat, kind: String, fix: String) throws {
        let owner = info.st_uid
        if !AgentAccount.mayOwnStore(owner) {
            throw StorageError(.insecureHome,
                "the \(kind) \(path) belongs to another OS user (uid \(owner)), who could change it: use a home of your own")
        }
        if info.st_mode & 0o022 != 0 {
            throw StorageError(.insecureHome,
                "the \(kind) \(path) can be written by other OS users (mode \(String(info.st_mode & 0o777, radix: 8))): run `\(fix) \(path)` if it is really yours")
        }
    }
}
