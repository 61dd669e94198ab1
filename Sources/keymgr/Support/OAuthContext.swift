import Foundation
import KeyManager
import Logging
import Sync

/// The store, the configured server and the OAuth services over them, for the dcr, token, dpop and login commands.
struct OAuthContext {
    let manager: KeyManager
    let connection: ServerConnection
    let home: StoreLocation
    let logger: Logger

    init(_ globals: GlobalOptions, profile: String, timeout: TimeInterval = 15, in context: CommandContext) throws {
        manager = try globals.openManager(in: context)
        connection = try ServerConnection.configured(in: manager, profile: profile, timeout: timeout,
                                                     environment: context.environment)
        home = globals.storeHome(in: context)
        logger = globals.logger(in: context)
    }

    var registrations: RegistrationService { RegistrationService(manager: manager, connection: connection, home: home, logger: logger) }
    var tokens: TokenService { TokenService(manager: manager, connection: connection, home: home, logger: logger) }
}
