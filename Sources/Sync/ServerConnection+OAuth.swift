import Foundation
import KeyManager
import ServerClients

extension ServerConnection {
    /// The profile's name, under which registrations and tokens are stored.
    public var serverName: String { settings.name }

    /// The dialect's client registration client; `unsupported` for a dialect without dynamic client registration.
    public var registrationClient: OAuthRegistrationClient {
        get throws {
            switch dialect.registrations {
            case nil:
                throw SyncError(.unsupported, "the configured server is \(settings.dialect.rawValue), which has no "
                    + "dynamic client registration: register the client at the server and import its tokens")
            case .rfc7591:
                return OAuthRegistrationClient(http: http)
            }
        }
    }

    /// A token endpoint client remembering server nonces in `nonces` and the server's time in `clock`.
    public func tokenClient(nonces: DPoPNonces, clock: ServerClock) -> OAuthTokenClient {
        OAuthTokenClient(http: http, nonces: nonces, clock: clock)
    }

    /// One of the profile's OAuth endpoints, or `config` saying how to set it.
    func endpoint(_ url: URL?, _ what: String, flag: String) throws -> URL {
        guard let url else {
            throw SyncError(.config, "the server profile has no \(what): run `keymgr server set … --issuer URL` "
                + "to discover it, or give \(flag) URL")
        }
        return url
    }

    var tokenEndpoint: URL {
        get throws { try endpoint(settings.tokenEndpoint, "token endpoint", flag: "--token-endpoint") }
    }
}

/// Discovers an issuer's endpoints (RFC 8414, then OpenID discovery) for `keymgr server set --issuer`.
public struct DiscoveryService: Sendable {
    let http: any HTTPClient

    public init(timeout: TimeInterval = 15) {
        self.http = CurlHTTPClient(timeout: timeout)
    }

    public init(http: any HTTPClient) {
        self.http = http
    }

    /// `server set`: saves `change` to the profile `name`, the endpoints of the issuer's metadata merged in first when
    /// the change names an issuer (discovery runs before anything is saved, so a failed discovery saves nothing).
    public func configure(_ manager: KeyManager, name: String, _ change: ServerSettingsChange) async throws -> ServerSettings {
        var change = change
        if let issuer = change.issuer { change.discovered = try await endpoints(issuer: issuer) }
        return try manager.configureServer(name: name, change)
    }

    /// The endpoints the issuer's metadata names, for `KeyManager.configureServer(name:_:)` to merge.
    public func endpoints(issuer: URL) async throws -> ServerSettingsChange.Endpoints {
        let metadata = try await OAuthDiscoveryClient(http: http).discover(issuer: issuer)
        return ServerSettingsChange.Endpoints(token: metadata.tokenEndpoint, registration: metadata.registrationEndpoint,
                                              revocation: metadata.revocationEndpoint,
                                              deviceAuthorization: metadata.deviceAuthorizationEndpoint)
    }
}
