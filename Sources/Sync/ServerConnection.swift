import Foundation
import KeyManager
import ServerClients

/// The configured identity server, turned into the wire clients its dialect speaks: the one place that
/// reads the stored profile, chooses by dialect and reads the admin credential.
public struct ServerConnection: Sendable {
    public let settings: ServerSettings
    let http: any HTTPClient
    let environment: [String: String]

    public init(settings: ServerSettings, http: any HTTPClient,
                environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.settings = settings
        self.http = http
        self.environment = environment
    }

    /// The store's configured profile over libcurl: `clientNotRegistered` (66) when a named profile does not exist,
    /// `config` when no server is configured at all.
    public static func configured(in manager: KeyManager, profile: String = "default", timeout: TimeInterval = 15,
                                  environment: [String: String] = ProcessInfo.processInfo.environment) throws -> ServerConnection {
        guard let settings = try manager.serverSettings(name: profile) else {
            guard profile == "default" else {
                throw SyncError(.clientNotRegistered, "there is no server profile \(profile): see `keymgr server list`, or make it "
                    + "with `keymgr server set --profile \(profile) --dialect pingam|oauth --base-url URL`")
            }
            throw SyncError(.config, "no server is configured: run `keymgr server set --dialect pingam --base-url URL --credential-file F`")
        }
        return ServerConnection(settings: settings, http: CurlHTTPClient(timeout: timeout), environment: environment)
    }

    /// The profile's dialect: what the server offers (docs/architecture.md, "Adding a dialect").
    public var dialect: any ServerDialect { settings.dialect.dialect }

    /// The dialect's device registry client with the admin credential; nil for a dialect that keeps no device registry.
    public func deviceClient() throws -> (any DeviceRegistry)? {
        switch dialect.deviceRegistry {
        case nil: nil
        case .pingAMDeviceREST: PingAMDeviceClient(server: pingAMServer, http: http, adminHeader: try adminHeader())
        }
    }

    /// The dialect's journey client; `config` for a dialect without journeys.
    public func journeyClient() throws -> any JourneyRunner {
        switch dialect.journeys {
        case nil:
            throw SyncError(.config, "the configured server is \(settings.dialect.rawValue), which has no journeys; "
                + "run `keymgr server set --dialect pingam …` to use them")
        case .pingAMAuthenticate:
            return PingAMJourneyClient(server: pingAMServer, http: http)
        }
    }

    var pingAMServer: PingAMServer { PingAMServer(baseURL: settings.baseURL, realmPath: settings.realmPath) }

    /// The admin credential as a request header: `Authorization: Bearer <token>`, or `<NAME>: <token>`.
    func adminHeader() throws -> (String, String) {
        guard let path = settings.credentialPath(environment: environment) else {
            throw SyncError(.config, "no admin credential: give `keymgr server set --credential-file F`, "
                + "or run under systemd with LoadCredentialEncrypted=keymgr.admin")
        }
        // Read with the rights of the process that syncs: through the agent, the agent's user, not the caller.
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)
        guard descriptor >= 0 else {
            let reason = String(cString: strerror(errno))
            throw SyncError(.config, "cannot read the admin credential file \(path) as uid \(geteuid()), who runs the "
                + "sync (through the agent: the agent's user): \(reason): let that user read it, or name another file "
                + "with `keymgr server set --credential-file F`")
        }
        let data = (try? FileHandle(fileDescriptor: descriptor, closeOnDealloc: true).readToEnd()) ?? Data()
        let token = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard !token.isEmpty, !token.contains("\n") else {
            throw SyncError(.config, "the admin credential file \(path) must hold one token on one line")
        }
        if settings.credentialHeader.caseInsensitiveCompare("Authorization") == .orderedSame {
            return ("Authorization", "Bearer \(token)")
        }
        return (settings.credentialHeader, token)
    }
}
