import Foundation
import KeyManager
import ServerClients

extension ServerConnection {
    /// The profile's name, under which registrations and tokens are stored.
    public var serverName: String { settings.name }

    /// A discovery client over this connection's HTTP.
    public var discoveryClient: OAuthDiscoveryClient { OAuthDiscoveryClient(http: http) }

    /// The RFC 7591/7592 client.
    public var registrationClient: OAuthRegistrationClient { OAuthRegistrationClient(http: http) }

    /// A token endpoint client remembering server nonces in `nonces`.
    public func tokenClient(nonces: DPoPNonces) -> OAuthTokenClient { OAuthTokenClient(http: http, nonces: nonces) }

    /// One of the profile's OAuth endpoints, or `config` saying how to set it.
    func endpoint(_ url: URL?, _ what: String, flag: String) throws -> URL {
        guard let url else {
            throw KeyManagerError(.config, "the server profile has no \(what): run `keymgr server set … --issuer URL` "
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

    /// The endpoints the issuer's metadata names, for `KeyManager.configureServer(name:_:)` to merge.
    public func endpoints(issuer: URL) async throws -> ServerSettingsChange.Endpoints {
        let metadata = try await OAuthDiscoveryClient(http: http).discover(issuer: issuer)
        return ServerSettingsChange.Endpoints(token: metadata.tokenEndpoint, registration: metadata.registrationEndpoint,
                                              revocation: metadata.revocationEndpoint,
                                              deviceAuthorization: metadata.deviceAuthorizationEndpoint)
    }
}
