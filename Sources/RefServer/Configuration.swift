import Foundation
import Logging

/// How the server asks the client to protect a bound key: the `authenticationType` output of the
/// DeviceBindingCallback, with PingAM's spelling.
public enum AuthenticationType: String, Sendable, CaseIterable, Codable {
    /// The key is usable without any user verification.
    case none = "NONE"
    /// The key is protected by an application PIN.
    case applicationPIN = "APPLICATION_PIN"
    /// The key is protected by a biometric check, with no fallback.
    case biometricOnly = "BIOMETRIC_ONLY"
    /// Biometric check, falling back to the device credential.
    case biometricAllowFallback = "BIOMETRIC_ALLOW_FALLBACK"
}

/// One authentication tree (journey) the server offers at
/// `POST {base}/json{realm}/authenticate?authIndexType=service&authIndexValue=<name>`.
public struct Journey: Sendable, Equatable {
    /// What the journey does after collecting the username.
    public enum Kind: Sendable, Equatable {
        /// NameCallback + PasswordCallback, then a DeviceBindingCallback asking for this auth type;
        /// a verified binding JWS creates a NEW device record.
        case deviceBinding(AuthenticationType)
        /// NameCallback, then a DeviceSigningVerifierCallback; a signature by one of the user's bound
        /// keys (found by the JWS header `kid`) succeeds and updates that record's `lastAccessDate`.
        case deviceSigning
        /// A usernameless signing tree: no NameCallback; a DeviceSigningVerifierCallback with an empty `userId`,
        /// answered with any bound key of the realm (found by the JWS header `kid`; `sub` must be its user).
        case usernamelessSigning
    }

    /// The tree name (`authIndexValue`).
    public var name: String
    /// What the tree does.
    public var kind: Kind

    /// Creates a journey description.
    public init(name: String, kind: Kind) {
        self.name = name
        self.kind = kind
    }

    /// The default binding journey: `RegisterDevice`, auth type NONE.
    public static let defaultBinding = Journey(name: "RegisterDevice", kind: .deviceBinding(.none))
    /// The default signing journey: `SignIn`.
    public static let defaultSigning = Journey(name: "SignIn", kind: .deviceSigning)
}

/// Everything `ReferenceServer.start(configuration:)` needs.
public struct ReferenceServerConfiguration: Sendable {
    /// The server's own SQLite file (created when missing).
    public var databasePath: String
    /// The TCP port on 127.0.0.1; 0 lets the OS pick one (read it back from `baseURL`).
    public var port: Int
    /// The realms served, as PingAM writes them: `/realms/root`, `/realms/root/realms/alpha`, ….
    /// Requests without a `realms/…` part address `/realms/root`.
    public var realmPaths: [String]
    /// The admin credential: device REST and `/__refserver/` requests must carry
    /// `Authorization: Bearer <token>` or `iPlanetDirectoryPro: <token>`.
    public var adminToken: String
    /// The `iss` values a binding or signing JWS may carry (PingAM's allowed application ids).
    public var allowedIssuers: [String]
    /// The journeys offered, by name.
    public var journeys: [Journey]
    /// The `timeout` output of the device callbacks, in seconds.
    public var callbackTimeout: Int
    /// The clock skew allowed on `exp`, `nbf` and `iat`, in seconds (PingAM allows 30).
    public var allowedClockSkew: TimeInterval
    /// How long an unfinished journey (`authId`) stays valid, in seconds.
    public var journeyLifetime: TimeInterval
    /// The largest request body accepted, in bytes.
    public var maxRequestBodySize: Int
    /// The server's clock (injectable so tests can age records and tokens).
    public var clock: @Sendable () -> Date
    /// Whether answers' `Date` header follows `clock` rather than the machine's time (`keymgr-refserver
    /// --clock-offset`: a server whose clock differs from the client's).
    public var dateHeaderFollowsClock = false
    /// Where the server logs; it never logs passwords, tokens or JWS.
    public var logger: Logger
    /// The authorization server's settings (DCR, tokens, DPoP, device grant).
    public var oauth: OAuthServerConfiguration
    /// Cookies, sessions and device limits of the journeys (set after `init`).
    public var journeyPolicy = JourneyPolicy()
    /// Makes the settings of a tenant (`/t/<id>/…`) from its arguments; nil: every tenant runs with this
    /// configuration and no users, and a tenant with arguments is refused.
    public var tenantConfigurator: TenantConfigurator? = nil

    /// Creates a configuration with PingAM-like defaults.
    public init(
        databasePath: String,
        port: Int = 0,
        realmPaths: [String] = ["/realms/root"],
        adminToken: String,
        allowedIssuers: [String] = ["keymgr"],
        journeys: [Journey] = [.defaultBinding, .defaultSigning],
        callbackTimeout: Int = 60,
        allowedClockSkew: TimeInterval = 30,
        journeyLifetime: TimeInterval = 300,
        maxRequestBodySize: Int = 1 << 20,
        clock: @escaping @Sendable () -> Date = { Date() },
        logger: Logger = ReferenceServerConfiguration.defaultLogger,
        oauth: OAuthServerConfiguration = OAuthServerConfiguration()
    ) {
        self.databasePath = databasePath
        self.port = port
        self.realmPaths = realmPaths
        self.adminToken = adminToken
        self.allowedIssuers = allowedIssuers
        self.journeys = journeys
        self.callbackTimeout = callbackTimeout
        self.allowedClockSkew = allowedClockSkew
        self.journeyLifetime = journeyLifetime
        self.maxRequestBodySize = maxRequestBodySize
        self.clock = clock
        self.logger = logger
        self.oauth = oauth
    }
}

/// What a realm path means in PingAM's other notations.
struct Realm: Sendable, Equatable {
    /// `/realms/root/realms/alpha`.
    var path: String
    /// The realm names below root: `["alpha"]`.
    var names: [String]

    /// Parses `/realms/root[/realms/x…]`; nil when malformed.
    init?(path: String) {
        let segments = path.split(separator: "/").map(String.init)
        guard segments.count >= 2, segments.count % 2 == 0, segments[0] == "realms", segments[1] == "root"
        else { return nil }
        var names: [String] = []
        var index = 2
        while index < segments.count {
            guard segments[index] == "realms", !segments[index + 1].isEmpty else { return nil }
            names.append(segments[index + 1])
            index += 2
        }
        self.path = "/" + segments.joined(separator: "/")
        self.names = names
    }

    /// The `realm` of a successful authentication: `/` for root, `/alpha`, `/alpha/beta`.
    var displayName: String { "/" + names.joined(separator: "/") }

    /// The DN suffix of identities in this realm, as in PingAM universal ids.
    var identitySuffix: String {
        if names.isEmpty { return "ou=am-config" }
        return names.reversed().map { "o=\(DN.escape($0))" }.joined(separator: ",") + ",ou=services,ou=am-config"
    }

    /// The universal id of `username`: `id=demo,ou=user,o=alpha,ou=services,ou=am-config`.
    func universalId(of username: String) -> String {
        "id=\(DN.escape(username)),ou=user,\(identitySuffix)"
    }
}

/// RFC 4514 escaping of attribute values in distinguished names.
enum DN {
    static func escape(_ value: String) -> String {
        var result = ""
        let characters = Array(value)
        for (index, character) in characters.enumerated() {
            switch character {
            case ",", "+", "\"", "\\", "<", ">", ";", "=":
                result.append("\\")
                result.append(character)
            case "#" where index == 0, " " where index == 0 || index == characters.count - 1:
                result.append("\\")
                result.append(character)
            default:
                result.append(character)
            }
        }
        return result
    }
}

extension ReferenceServerConfiguration {
    /// Warnings and errors to stderr: stdout stays free for the executable's one `listening on` line.
    public static var defaultLogger: Logger {
        var logger = Logger(label: "keymgr.refserver") { label in StreamLogHandler.standardError(label: label) }
        logger.logLevel = .warning
        return logger
    }
}
