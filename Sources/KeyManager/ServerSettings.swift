import Foundation

/// Whether the OAuth tokens keymgr asks for are bound to a DPoP key (RFC 9449).
public enum TokenBinding: String, Sendable, CaseIterable, Codable {
    case bound, unbound
}

/// A configured identity server: settings only. The admin credential stays in its file and is never stored.
public struct ServerSettings: Sendable, Equatable {
    /// The profile's name; `default` is the one `keymgr server set` writes.
    public var name: String
    public var dialect: DialectName
    public var baseURL: URL
    /// PingAM's realm path, e.g. `/realms/root/realms/alpha`.
    public var realmPath: String
    /// Where the admin credential is read from; nil means `$CREDENTIALS_DIRECTORY/keymgr.admin`.
    public var credentialFile: String?
    /// `Authorization` (sent as a Bearer token) or a header name such as `iPlanetDirectoryPro`.
    public var credentialHeader: String
    public var tokenEndpoint: URL?
    public var registrationEndpoint: URL?
    public var revocationEndpoint: URL?
    public var deviceAuthorizationEndpoint: URL?
    public var tokenBinding: TokenBinding
    /// When the profile was last saved.
    public var updatedAt: Date
    /// Whether plain `http://` to a host other than loopback is allowed (`server set --allow-insecure-http`).
    public var allowInsecureHTTP: Bool
    /// Seconds the server's clock is ahead of this device's (negative: behind), as its answers' `Date` header last
    /// showed it; 0 when no skew is known.
    public var clockOffset: TimeInterval = 0

    public init(name: String = "default", dialect: DialectName, baseURL: URL, realmPath: String = "/realms/root",
                credentialFile: String? = nil, credentialHeader: String = "Authorization", tokenEndpoint: URL? = nil,
                registrationEndpoint: URL? = nil, revocationEndpoint: URL? = nil, deviceAuthorizationEndpoint: URL? = nil,
                tokenBinding: TokenBinding = .bound, updatedAt: Date = Date(), allowInsecureHTTP: Bool = false) {
        self.name = name
        self.dialect = dialect
        self.baseURL = baseURL
        self.realmPath = realmPath
        self.credentialFile = credentialFile
        self.credentialHeader = credentialHeader
        self.tokenEndpoint = tokenEndpoint
        self.registrationEndpoint = registrationEndpoint
        self.revocationEndpoint = revocationEndpoint
        self.deviceAuthorizationEndpoint = deviceAuthorizationEndpoint
        self.tokenBinding = tokenBinding
        self.updatedAt = updatedAt
        self.allowInsecureHTTP = allowInsecureHTTP
    }

    /// The profile's base URL: `given` when there is one, else, for a dialect whose issuer stands for its base URL
    /// (`oauth`: discovery finds every endpoint from it), the issuer. Trailing slashes are dropped, so
    /// `https://am.example.com/am/` and `…/am` are one server. Without one it is a usage error.
    public static func baseURL(given: URL?, dialect: DialectName, issuer: URL?) throws -> URL {
        guard let chosen = given ?? (dialect.dialect.issuerStandsForBaseURL ? issuer : nil) else {
            throw KeyManagerError(.usage, dialect.dialect.missingBaseURL)
        }
        var text = chosen.absoluteString
        while text.hasSuffix("/") { text.removeLast() }
        guard let url = URL(string: text) else {
            throw KeyManagerError(.usage, "\(chosen.absoluteString) is not a URL keymgr can use as a base URL")
        }
        return url
    }

    /// Where the admin credential comes from: the profile's file, else `$CREDENTIALS_DIRECTORY/keymgr.admin`.
    public func credentialPath(environment: [String: String]) -> String? {
        if let credentialFile { return credentialFile }
        if let directory = environment["CREDENTIALS_DIRECTORY"], !directory.isEmpty {
            return URL(fileURLWithPath: directory, isDirectory: true).appendingPathComponent("keymgr.admin", isDirectory: false).path
        }
        return nil
    }
}

extension ServerSettings {
    /// The rules of a profile's own values, kept below the CLI so that every caller is held to them: each URL
    /// passes `checkTransport`, and the realm path is a path without characters that could change the request or
    /// what a terminal shows.
    /// - Throws: `config` for a URL, `usage` for a realm path.
    public func checkRules() throws {
        for url in [baseURL, tokenEndpoint, registrationEndpoint, revocationEndpoint, deviceAuthorizationEndpoint].compactMap({ $0 }) {
            try checkTransport(url)
        }
        try Self.checkRealmPath(realmPath)
    }

    /// A realm path such as `/realms/root/realms/alpha`: starts with `/`; no whitespace, `?`, `#`, `%` or `\`;
    /// no control, bidirectional or invalid-UTF-8 character (the rules of user ids); at most 1024 bytes.
    public static func checkRealmPath(_ path: String) throws {
        guard path.hasPrefix("/"), !path.contains(where: { $0.isWhitespace || "?#%\\".contains($0) }) else {
            throw KeyManagerError(.usage, "--realm-path must be a path such as /realms/root or /realms/root/realms/alpha")
        }
        try TextRules.checkIdentifier(path, what: "realm path")
    }

    /// The rule of every URL keymgr sends a credential to: `https://`, or plain `http://` to loopback, or to any
    /// host when the profile allows it (`--allow-insecure-http`).
    /// - Throws: `config` saying what to do.
    public func checkTransport(_ url: URL) throws {
        let scheme = url.scheme?.lowercased() ?? ""
        guard scheme == "https" || scheme == "http" else {
            throw KeyManagerError(.config, "\(url.absoluteString) is not an https:// URL: give the server's https:// address")
        }
        if scheme == "http", !allowInsecureHTTP, !Self.isLoopback(url.host) {
            throw KeyManagerError(.config, "\(url.absoluteString) is plain http:// to a host other than loopback: the admin "
                + "credential and tokens would cross the network unencrypted. Use https://, or if this network is "
                + "trusted, run `keymgr server set … --allow-insecure-http`")
        }
    }

    /// A URL the server handed out and keymgr will send a credential to (RFC 7592's `registration_client_uri`,
    /// which gets the registration access token): it must keep `checkTransport` and share the origin (scheme, host
    /// and port) of the profile's registration endpoint or of its base URL (the issuer's), so a server cannot send
    /// keymgr, and the token, anywhere else.
    /// - Throws: `badInput` (65), naming the URL and the origins allowed.
    public func checkServerGivenURL(_ url: URL, what: String) throws {
        let allowed = [registrationEndpoint, baseURL].compactMap { $0 }.compactMap(Self.origin(of:))
        guard let origin = Self.origin(of: url), allowed.contains(origin) else {
            throw KeyManagerError(.badInput, "the server gave a \(what) on another origin than its own "
                + "(\(url.absoluteString), expected \(Set(allowed).sorted().joined(separator: " or "))): "
                + "keymgr sends the registration access token to no other origin and stores no such URI. Ask the "
                + "server's administrator to fix its registration endpoint, or set the profile's --registration-endpoint "
                + "on the origin its clients are managed at")
        }
        do {
            try checkTransport(url)
        } catch let refusal as KeyManagerError {
            throw KeyManagerError(.badInput, "the server gave a \(what) keymgr will not use: \(refusal.message)")
        }
    }

    /// `scheme://host:port` in lower case, the port made explicit (80 for http, 443 for https); nil without a host.
    static func origin(of url: URL) -> String? {
        guard let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased(), !host.isEmpty else { return nil }
        let port = url.port ?? (scheme == "https" ? 443 : scheme == "http" ? 80 : -1)
        return "\(scheme)://\(host):\(port)"
    }

    static func isLoopback(_ host: String?) -> Bool {
        guard let host = host?.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "[]")) else { return false }
        return host == "localhost" || host == "::1" || host.hasPrefix("127.")
    }
}

/// What one `keymgr server set` gives: every nil keeps what the profile has (a new profile takes the defaults).
///
/// `discovered` holds the endpoints an issuer's metadata named in this run: they replace the profile's endpoints,
/// and the endpoints given explicitly in this run replace both.
public struct ServerSettingsChange: Sendable, Equatable {
    /// Endpoints found by discovery (RFC 8414 / OpenID).
    public struct Endpoints: Sendable, Equatable {
        public var token: URL?
        public var registration: URL?
        public var revocation: URL?
        public var deviceAuthorization: URL?

        public init(token: URL? = nil, registration: URL? = nil, revocation: URL? = nil, deviceAuthorization: URL? = nil) {
            self.token = token
            self.registration = registration
            self.revocation = revocation
            self.deviceAuthorization = deviceAuthorization
        }
    }

    public var dialect: DialectName?
    public var baseURL: URL?
    /// The OAuth issuer given in this run (its endpoints are in `discovered`).
    public var issuer: URL?
    public var realmPath: String?
    public var credentialFile: String?
    public var credentialHeader: String?
    public var tokenEndpoint: URL?
    public var registrationEndpoint: URL?
    public var revocationEndpoint: URL?
    public var deviceAuthorizationEndpoint: URL?
    public var tokenBinding: TokenBinding?
    public var allowInsecureHTTP: Bool?
    public var discovered: Endpoints?

    public init() {}

    /// The profile `name` after this change: `existing` with the given fields replaced, or a new profile.
    /// A new profile needs a dialect, and a base URL or (oauth) an issuer, which then stands for the base URL.
    /// - Throws: `usage` naming what a new profile lacks.
    public func applied(to existing: ServerSettings?, name: String, at now: Date) throws -> ServerSettings {
        guard let dialect = dialect ?? existing?.dialect else {
            throw KeyManagerError(.usage, "the profile \(name) is new: give " + DialectName.allCases.map { "--dialect \($0.rawValue)" }.joined(separator: " or "))
        }
        // A base URL given now is normalised; a new profile without one derives it from the issuer (oauth only).
        let baseURL = try existing.flatMap { existing in self.baseURL == nil ? existing.baseURL : nil }
            ?? ServerSettings.baseURL(given: self.baseURL, dialect: dialect, issuer: issuer)
        var settings = existing ?? ServerSettings(name: name, dialect: dialect, baseURL: baseURL)
        settings.name = name
        settings.dialect = dialect
        settings.baseURL = baseURL
        if let realmPath { settings.realmPath = realmPath }
        if let credentialFile { settings.credentialFile = credentialFile }
        if let credentialHeader { settings.credentialHeader = credentialHeader }
        if let discovered {
            settings.tokenEndpoint = discovered.token ?? settings.tokenEndpoint
            settings.registrationEndpoint = discovered.registration ?? settings.registrationEndpoint
            settings.revocationEndpoint = discovered.revocation ?? settings.revocationEndpoint
            settings.deviceAuthorizationEndpoint = discovered.deviceAuthorization ?? settings.deviceAuthorizationEndpoint
        }
        if let tokenEndpoint { settings.tokenEndpoint = tokenEndpoint }
        if let registrationEndpoint { settings.registrationEndpoint = registrationEndpoint }
        if let revocationEndpoint { settings.revocationEndpoint = revocationEndpoint }
        if let deviceAuthorizationEndpoint { settings.deviceAuthorizationEndpoint = deviceAuthorizationEndpoint }
        if let tokenBinding { settings.tokenBinding = tokenBinding }
        if let allowInsecureHTTP { settings.allowInsecureHTTP = allowInsecureHTTP }
        settings.updatedAt = now
        return settings
    }
}

/// What removing a server profile takes with it: what `server remove` names before it asks.
public struct ServerRemoval: Sendable, Equatable {
    public var name: String
    /// Client registrations (RFC 7591) kept for that server.
    public var registrations: Int
    /// Token sets (and their DPoP keys) kept for that server.
    public var tokenSets: Int
}
