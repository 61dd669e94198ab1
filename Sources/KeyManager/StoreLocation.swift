import Foundation
import Storage

/// Where a keymgr store lives: the directory named by `--home`, else `$KEYMGR_HOME`, else
/// `${XDG_DATA_HOME:-~/.local/share}/keymgr`. It holds the database, the master key (unless it comes from
/// elsewhere) and the sync lock.
public struct StoreLocation: Sendable, Equatable {
    let home: StoreHome

    public init(url: URL) {
        home = StoreHome(url: url)
    }

    /// The location named by `--home` (`explicit`), the environment, or the default.
    public static func resolve(explicit: String?,
                               environment: [String: String] = ProcessInfo.processInfo.environment) -> StoreLocation {
        StoreLocation(home: StoreHome.resolve(explicit: explicit, environment: environment))
    }

    init(home: StoreHome) {
        self.home = home
    }

    /// The directory.
    public var url: URL { home.url }

    /// Refuses a missing home, or one another OS user could write, before anything is made in it.
    ///
    /// - Throws: `config`, with a message that says what to do.
    public func checkUsable() throws {
        try KeyManager.mapped { try home.prepare(create: false) }
    }
}
