import Foundation
import KeyManager
import Sync

/// The store, the configured server and the OAuth services over them, for the dcr, token, dpop and login commands.
struct OAuthContext {
    let manager: KeyManager
    let connection: ServerConnection
    let globals: GlobalOptions

    init(_ globals: GlobalOptions, profile: String, timeout: TimeInterval = 15) throws {
        self.globals = globals
        manager = try globals.openManager()
        connection = try ServerConnection.configured(in: manager, profile: profile, timeout: timeout)
    }

    var registrations: RegistrationService { RegistrationService(manager: manager, connection: connection, home: globals.storeHome, logger: globals.logger) }
    var tokens: TokenService { TokenService(manager: manager, connection: connection, home: globals.storeHome, logger: globals.logger) }

    /// All of stdin.
    static func readStdin() -> Data { FileHandle.standardInput.readDataToEndOfFile() }
}
