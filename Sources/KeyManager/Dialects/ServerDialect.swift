/// What a kind of identity server offers keymgr beyond the OAuth endpoints every profile may name: its capabilities,
/// each nil (or false) when the server lacks it. Code that depends on a capability asks the profile's dialect for it
/// and never compares dialect names, so a new dialect is one file conforming to this protocol plus its line in
/// `DialectName.dialect` (docs/architecture.md, "Adding a dialect").
public protocol ServerDialect: Sendable {
    /// The dialect's name in `server set --dialect` and in every output.
    var name: DialectName { get }
    /// Other names `--dialect` accepts for it.
    var aliases: [String] { get }
    /// How the `servers` table spells it.
    var storedName: String { get }
    /// The device registry sync reconciles with (rules 1–4) and `admin` lists and revokes in; nil when the server
    /// keeps none (sync then checks only client registrations, and `admin` says `unsupported`).
    var deviceRegistry: DeviceRegistryAPI? { get }
    /// The authentication journeys `bind --journey` and `sign --journey` walk; nil when the server has none.
    var journeys: JourneyAPI? { get }
    /// How per-user OAuth clients are registered and managed (`dcr`, sync rule 5); nil when the server has no
    /// dynamic client registration.
    var registrations: RegistrationAPI? { get }
    /// Whether a new profile that gives an issuer and no base URL takes the issuer as its base URL.
    var issuerStandsForBaseURL: Bool { get }
    /// What a new profile without a base URL is told (a usage error).
    var missingBaseURL: String { get }
}

/// The device registry protocols keymgr speaks.
public enum DeviceRegistryAPI: Sendable, Equatable {
    /// PingAM's device REST (`/json/realms/…/users/{user}/devices/2fa/binding`).
    case pingAMDeviceREST
}

/// The journey protocols keymgr speaks.
public enum JourneyAPI: Sendable, Equatable {
    /// PingAM's `/json/realms/…/authenticate` callbacks.
    case pingAMAuthenticate
}

/// The client registration protocols keymgr speaks.
public enum RegistrationAPI: Sendable, Equatable {
    /// RFC 7591 registration and RFC 7592 management.
    case rfc7591
}

/// The dialects keymgr knows, by name: what a profile stores and `--dialect` parses.
public enum DialectName: String, Sendable, CaseIterable, Codable {
    case pingam
    case oauth

    /// The one place a dialect is chosen: exhaustive, so a new name does not compile until it has its dialect.
    public var dialect: any ServerDialect {
        switch self {
        case .pingam: PingAMDialect()
        case .oauth: OAuthDialect()
        }
    }

    /// Accepts a dialect's name or one of its aliases, in any case.
    public init?(name: String) {
        let name = name.lowercased()
        guard let found = Self.allCases.first(where: { $0.rawValue == name || $0.dialect.aliases.contains(name) }) else { return nil }
        self = found
    }

    /// The dialect the `servers` table spells `stored`.
    public init?(stored: String) {
        guard let found = Self.allCases.first(where: { $0.dialect.storedName == stored }) else { return nil }
        self = found
    }

    /// `pingam or oauth (or curity, another name for oauth)`: what `--dialect` accepts, for messages.
    public static var accepted: String {
        let names = allCases.map(\.rawValue)
        let aliases = allCases.flatMap { dialect in dialect.dialect.aliases.map { "\($0), another name for \(dialect.rawValue)" } }
        return (names.dropLast().joined(separator: ", ") + (names.count > 1 ? " or " : "") + (names.last ?? ""))
            + (aliases.isEmpty ? "" : " (or \(aliases.joined(separator: "; ")))")
    }

    /// Whether the server keeps a registry of device bindings that sync reconciles with (rules 1–4).
    public var hasDeviceRegistry: Bool { dialect.deviceRegistry != nil }
}
