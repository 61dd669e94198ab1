import Foundation
import KeymgrCore

/// A static client that templatized registrations copy (Curity's "template client"): a registration
/// body `{"software_id": "<name>"}` gets this client's metadata, plus any extension fields it sent.
public struct OAuthClientTemplate: Sendable, Equatable {
    /// The template client id: the `software_id` a registration names.
    public var name: String
    /// The RFC 7591 metadata every client made from it gets (`grant_types`, `scope`,
    /// `token_endpoint_auth_method`, …); these members win over what a registration sends.
    public var metadata: [String: JSONValue]

    /// Creates a template.
    public init(name: String, metadata: [String: JSONValue]) {
        self.name = name
        self.metadata = metadata
    }

    /// The default template, `keymgr-template`: refresh and device grants, `client_secret_basic`.
    public static let keymgr = OAuthClientTemplate(
        name: "keymgr-template",
        metadata: [
            "grant_types": ["refresh_token", "urn:ietf:params:oauth:grant-type:device_code"],
            "scope": "openid read",
            "token_endpoint_auth_method": "client_secret_basic",
            "application_type": "native",
            "client_name": "keymgr",
        ])
}

/// Whose reading of the RFCs the authorization server follows where servers differ (`keymgr-refserver --oauth-mode`).
public enum OAuthServerMode: String, Sendable, CaseIterable {
    /// Curity's: the defaults of `OAuthServerConfiguration`.
    case curity
    /// A server built on oauthlib (Python): `client_id` required in the device authorization request even from an
    /// authenticated client, no `device_authorization_endpoint` in discovery, Bearer tokens only (DPoP proofs are
    /// ignored), no `interval` or `verification_uri_complete` in the device authorization answer, the form's
    /// `Content-Type` compared exactly, and a Bearer challenge on `invalid_client`.
    case oauthlib
}

/// The authorization server's settings: Curity's behaviour by default, every switch a test needs.
public struct OAuthServerConfiguration: Sendable {
    /// The initial access tokens a registration must present as `Authorization: Bearer …`; empty =
    /// open registration (RFC 7591 allows both).
    public var initialAccessTokens: [String]
    /// The template clients, by `software_id`.
    public var templates: [OAuthClientTemplate]
    /// Whether a registration without a known `software_id` (full RFC 7591 metadata) is accepted.
    public var allowsFullMetadataRegistration: Bool
    /// Curity's `issue-token-bound-authorization-code`: true = every token request must carry a DPoP
    /// proof (`invalid_dpop_proof` otherwise); false = tokens are bound only when the client sends one.
    public var issuesTokenBoundTokens: Bool
    /// Whether DPoP proofs at the token endpoint must carry a server nonce (`use_dpop_nonce`).
    public var requiresDPoPNonce: Bool
    /// Whether DPoP proofs at the resource endpoint must carry a server nonce (401 `use_dpop_nonce`).
    public var resourceRequiresDPoPNonce: Bool
    /// Whether `/.well-known/oauth-authorization-server` is served; false leaves only the OpenID
    /// configuration, to test a client's fallback.
    public var servesAuthorizationServerMetadata: Bool
    /// Curity's default: every RFC 7592 GET and PUT rotates the registration access token and the secret.
    public var rotatesRegistrationCredentials: Bool
    /// The issuer's path below the base URL (`""` = the base URL itself, `/oauth/v2/oauth-anonymous` as Curity).
    public var issuerPath: String
    /// The scopes the discovery metadata lists.
    public var scopesSupported: [String]
    /// Access token lifetime, seconds.
    public var accessTokenLifetime: TimeInterval
    /// Refresh token lifetime, seconds.
    public var refreshTokenLifetime: TimeInterval
    /// Read-write lifetime of a registration access token, seconds (Curity: 28 days); after it only DELETE works.
    public var registrationTokenLifetime: TimeInterval
    /// Device code lifetime (RFC 8628 `expires_in`), seconds.
    public var deviceCodeLifetime: TimeInterval
    /// The polling interval the device authorization response announces, seconds.
    public var deviceCodeInterval: Int
    /// How old a DPoP proof's `iat` may be, seconds (the clock skew of the server configuration is added).
    public var dpopProofLifetime: TimeInterval
    /// How long a server nonce stays the current one before a new one replaces it, seconds.
    public var dpopNonceLifetime: TimeInterval
    /// oauthlib: a device authorization request without `client_id` is refused (400 `invalid_request` "Missing
    /// client_id parameter.") before the client is authenticated, even when it authenticates with HTTP Basic.
    public var requiresClientIdInDeviceAuthorization = false
    /// Whether discovery lists `device_authorization_endpoint` (RFC 8628 §4 makes it optional; oauthlib-based
    /// servers leave it out). The endpoint is served either way.
    public var advertisesDeviceAuthorizationEndpoint = true
    /// Whether DPoP (RFC 9449) is supported; false: proofs are ignored, every token is Bearer, discovery lists no
    /// `dpop_signing_alg_values_supported` (oauthlib has no DPoP).
    public var supportsDPoP = true
    /// oauthlib's defaults: the device authorization answer carries no `interval` (the client uses 5 s, RFC 8628
    /// §3.2) and no `verification_uri_complete`.
    public var omitsOptionalDeviceMembers = false
    /// oauthlib: the device authorization request's `Content-Type` must be exactly
    /// `application/x-www-form-urlencoded` (no parameters), else 400 `invalid_request`.
    public var requiresExactFormContentType = false
    /// The challenge scheme of a 401 `invalid_client` after HTTP Basic: `Basic` (RFC 6749 §5.2), or `Bearer`
    /// as oauthlib sends for every 401.
    public var invalidClientChallengeScheme = "Basic"
    /// How a registration access token of a deleted, revoked or unknown client is refused at the RFC 7592 endpoint:
    /// 401 `invalid_token` (RFC 7592 §2, RFC 6750 §3.1), 400 `access_denied` as Authlib 1.9 answers, or 403.
    public var refusedRegistrationTokenStatus = 401

    /// Creates a configuration with Curity-like defaults (open registration, the `keymgr-template`
    /// template, unbound tokens allowed, no nonces).
    public init(
        initialAccessTokens: [String] = [],
        templates: [OAuthClientTemplate] = [.keymgr],
        allowsFullMetadataRegistration: Bool = true,
        issuesTokenBoundTokens: Bool = false,
        requiresDPoPNonce: Bool = false,
        resourceRequiresDPoPNonce: Bool = false,
        servesAuthorizationServerMetadata: Bool = true,
        rotatesRegistrationCredentials: Bool = true,
        issuerPath: String = "",
        scopesSupported: [String] = ["openid", "profile", "read", "write"],
        accessTokenLifetime: TimeInterval = 300,
        refreshTokenLifetime: TimeInterval = 86_400,
        registrationTokenLifetime: TimeInterval = 28 * 86_400,
        deviceCodeLifetime: TimeInterval = 600,
        deviceCodeInterval: Int = 5,
        dpopProofLifetime: TimeInterval = 60,
        dpopNonceLifetime: TimeInterval = 300
    ) {
        self.initialAccessTokens = initialAccessTokens
        self.templates = templates
        self.allowsFullMetadataRegistration = allowsFullMetadataRegistration
        self.issuesTokenBoundTokens = issuesTokenBoundTokens
        self.requiresDPoPNonce = requiresDPoPNonce
        self.resourceRequiresDPoPNonce = resourceRequiresDPoPNonce
        self.servesAuthorizationServerMetadata = servesAuthorizationServerMetadata
        self.rotatesRegistrationCredentials = rotatesRegistrationCredentials
        self.issuerPath = issuerPath
        self.scopesSupported = scopesSupported
        self.accessTokenLifetime = accessTokenLifetime
        self.refreshTokenLifetime = refreshTokenLifetime
        self.registrationTokenLifetime = registrationTokenLifetime
        self.deviceCodeLifetime = deviceCodeLifetime
        self.deviceCodeInterval = deviceCodeInterval
        self.dpopProofLifetime = dpopProofLifetime
        self.dpopNonceLifetime = dpopNonceLifetime
    }

    /// Follows `mode`'s reading of the RFCs (see `OAuthServerMode`); the other settings stay as they are.
    public mutating func adopt(_ mode: OAuthServerMode) {
        let oauthlib = mode == .oauthlib
        requiresClientIdInDeviceAuthorization = oauthlib
        advertisesDeviceAuthorizationEndpoint = !oauthlib
        supportsDPoP = !oauthlib
        omitsOptionalDeviceMembers = oauthlib
        requiresExactFormContentType = oauthlib
        invalidClientChallengeScheme = oauthlib ? "Bearer" : "Basic"
        if oauthlib { issuesTokenBoundTokens = false }
    }

    /// The issuer path's segments (`/a/b` → `["a", "b"]`).
    var issuerSegments: [String] {
        issuerPath.split(separator: "/").map(String.init)
    }
}

/// The grant types the server knows, as they appear on the wire.
enum GrantType {
    static let refreshToken = "refresh_token"
    static let deviceCode = "urn:ietf:params:oauth:grant-type:device_code"
    static let authorizationCode = "authorization_code"
    /// What a client may register (authorization_code is registrable although no code flow is served).
    static let registrable: Set<String> = [refreshToken, deviceCode, authorizationCode]
}

/// The client authentication methods at the token endpoint.
enum ClientAuthMethod {
    static let basic = "client_secret_basic"
    static let post = "client_secret_post"
    static let none = "none"
    static let all: [String] = [basic, post, none]
}

/// Where the authorization server's endpoints live (Curity's paths).
enum OAuthPath {
    static let token = ["oauth", "v2", "oauth-token"]
    static let registration = ["oauth", "v2", "oauth-dynamic-client-registration"]
    static let revocation = ["oauth", "v2", "oauth-revoke"]
    static let deviceAuthorization = ["oauth", "v2", "oauth-device-authorization"]
    static let deviceVerification = ["oauth", "v2", "oauth-device"]
    static let userinfo = ["oauth", "v2", "oauth-userinfo"]
    static let introspection = ["oauth", "v2", "oauth-introspect"]

    static func string(_ segments: [String]) -> String { "/" + segments.joined(separator: "/") }
}

extension OAuthClientTemplate {
    /// Reads templates from a JSON object `{"<software_id>": {<metadata>}, …}` (the
    /// `keymgr-refserver --oauth-templates` file), sorted by name.
    public static func templates(fromJSON data: Data) throws -> [OAuthClientTemplate] {
        guard let object = (try? JSONValue.parse(Array(data)))?.objectValue else {
            throw ReferenceServerError("the templates file must hold a JSON object of template name to metadata object")
        }
        return try object.keys.sorted().map { name in
            guard let metadata = object[name]?.objectValue, !name.isEmpty else {
                throw ReferenceServerError("template \(name) must be a non-empty name with a metadata object")
            }
            return OAuthClientTemplate(name: name, metadata: metadata)
        }
    }
}
