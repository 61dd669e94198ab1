import ArgumentParser
import Dispatch
import Foundation
import RefServer

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `keymgr-refserver`: the reference identity server (PingAM's device REST and journeys, and an OAuth
/// authorization server standing in for Curity) as a process.
///
/// Prints exactly one line on stdout, `listening on http://127.0.0.1:PORT`, once it accepts
/// connections; logs go to stderr. Stops on SIGTERM/SIGINT, when `--parent-pid` dies, or after
/// `--idle-exit` seconds without a request, so tests and demos never leave it running.
struct RefServerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keymgr-refserver",
        abstract: "A local stand-in for PingAM (device binding REST, journeys) and Curity (DCR, tokens, DPoP) on 127.0.0.1.",
        discussion: """
            Every route is served again under /t/<id>/ (1 to 64 letters, digits, - or _): a tenant with its own users, \
            devices, clients, tokens, faults and request journal, in memory, whose base URL is http://127.0.0.1:PORT/t/<id>. \
            A tenant is made on first use with this server's options, or by PUT /__refserver/tenants/<id> (admin token) \
            with {"arguments": [...]}: options of its own after the server's (not --db, --port, --admin-token-file, \
            --idle-exit, --parent-pid or --clock-offset).
            """)

    @Option(name: .customLong("db"), help: "The server's SQLite file (created when missing).")
    var databasePath: String

    @Option(help: "TCP port on 127.0.0.1; 0 lets the OS pick one.")
    var port: Int = 0

    @Option(
        help: ArgumentHelp(
            "File holding the admin token; created with a random token (mode 0600) when missing.",
            discussion: "Without it the token is written to <db>.admin-token."))
    var adminTokenFile: String?

    @Option(name: .customLong("realm"), help: "A realm to serve, e.g. /realms/root/realms/alpha (repeatable).")
    var realms: [String] = []

    @Option(name: .customLong("issuer"), help: "An allowed JWS issuer (iss) (repeatable; default keymgr).")
    var issuers: [String] = []

    @Option(name: .customLong("add-user"), help: "NAME:PASSWORD, added to the first realm (repeatable).")
    var users: [String] = []

    @Option(help: "Auth type the binding journey asks for: NONE, APPLICATION_PIN, BIOMETRIC_ONLY, BIOMETRIC_ALLOW_FALLBACK.")
    var authType: String = "NONE"

    @Option(help: "Name of the binding journey.")
    var bindingJourney: String = Journey.defaultBinding.name

    @Option(help: "Name of the signing journey.")
    var signingJourney: String = Journey.defaultSigning.name

    @Option(help: "File holding an initial access token that DCR requires (repeatable; none: open registration).")
    var oauthInitialAccessTokenFile: [String] = []

    @Option(help: "JSON file of DCR template clients, {\"<software_id>\": {<metadata>}}; default: keymgr-template.")
    var oauthTemplates: String?

    @Flag(help: "Issue only DPoP-bound tokens (Curity's issue-token-bound-authorization-code = true).")
    var oauthTokenBound = false

    @Flag(help: "Require a server nonce in DPoP proofs at the token endpoint.")
    var oauthDpopNonce = false

    @Flag(help: "Require a server nonce in DPoP proofs at the resource (userinfo) endpoint.")
    var oauthResourceDpopNonce = false

    @Flag(help: "Serve only /.well-known/openid-configuration, not the RFC 8414 metadata.")
    var oauthOpenidDiscoveryOnly = false

    @Option(help: "Whose reading of the RFCs the authorization server follows: curity (default) or oauthlib (client_id required in device authorization, no device endpoint in discovery, Bearer only).")
    var oauthMode: String = OAuthServerMode.curity.rawValue

    @Option(help: "The OAuth issuer's path below the base URL, e.g. /oauth/v2/oauth-anonymous.")
    var oauthIssuerPath: String = ""

    @Option(help: "The polling interval (seconds, 1 or more) device authorization answers announce; default 5.")
    var oauthDeviceInterval: Int = 5

    @Option(help: "Run the server's clock this many seconds ahead of the machine's (negative: behind), its Date headers too, as a server whose clock differs from the client's; default 0.")
    var clockOffset: Double = 0

    @Option(help: "How the RFC 7592 endpoint refuses the registration access token of a deleted client: 401 (invalid_token, the RFC; default), 400 (access_denied, as Authlib) or 403.")
    var oauthRefusedRegistrationTokenStatus: Int = 401

    @Option(help: "Name of a usernameless signing journey (no NameCallback; the callback's userId is empty).")
    var usernamelessJourney: String?

    @Option(help: "The device callbacks' timeout output, in seconds.")
    var callbackTimeout: Int = 60

    @Option(help: "Refuse a binding when the user already has this many devices (PingAM's Max Saved Devices).")
    var maxSavedDevices: Int?

    @Option(help: ArgumentHelp(
        "A hostile server: signing steps also carry a DeviceSigningVerifierCallback for each of these users (comma-separated).",
        valueName: "names"))
    var foreignSigningUsers: String?

    @Option(help: ArgumentHelp("A hostile server: the DeviceBindingCallback names this user instead of the one who logged in.",
                               valueName: "name"))
    var foreignBindingUser: String?

    @Flag(help: "Open a session on success even when the client asks noSession=true.")
    var ignoreNoSession = false

    @Option(help: "Stop after this many seconds without a request.")
    var idleExit: Double?

    @Option(help: "Stop when this process is gone.")
    var parentPid: Int32?

    func validate() throws {
        guard (0...65_535).contains(port) else { throw ValidationError("--port must be in 0...65535") }
        guard Self.authenticationType(authType) != nil else {
            throw ValidationError("--auth-type must be NONE, APPLICATION_PIN, BIOMETRIC_ONLY or BIOMETRIC_ALLOW_FALLBACK")
        }
        for user in users where !user.contains(":") || user.hasPrefix(":") {
            throw ValidationError("--add-user takes NAME:PASSWORD")
        }
        if !oauthIssuerPath.isEmpty, !oauthIssuerPath.hasPrefix("/") || oauthIssuerPath.hasSuffix("/") {
            throw ValidationError("--oauth-issuer-path must start with / and not end with /")
        }
        if let idleExit, idleExit <= 0 { throw ValidationError("--idle-exit must be positive") }
        guard OAuthServerMode(rawValue: oauthMode) != nil else {
            throw ValidationError("--oauth-mode must be one of \(OAuthServerMode.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        if oauthMode == OAuthServerMode.oauthlib.rawValue, oauthTokenBound || oauthDpopNonce || oauthResourceDpopNonce {
            throw ValidationError("--oauth-mode oauthlib has no DPoP: it cannot be combined with --oauth-token-bound or the DPoP nonce flags")
        }
        guard [400, 401, 403].contains(oauthRefusedRegistrationTokenStatus) else {
            throw ValidationError("--oauth-refused-registration-token-status must be 400, 401 or 403")
        }
        guard abs(clockOffset) <= 10 * 365 * 86_400 else { throw ValidationError("--clock-offset must be within ten years") }
        guard oauthDeviceInterval >= 1 else { throw ValidationError("--oauth-device-interval must be 1 or more") }
        guard (1...3600).contains(callbackTimeout) else { throw ValidationError("--callback-timeout must be in 1...3600") }
        if let maxSavedDevices, maxSavedDevices < 1 { throw ValidationError("--max-saved-devices must be at least 1") }
        if let usernamelessJourney, [bindingJourney, signingJourney].contains(usernamelessJourney) {
            throw ValidationError("--usernameless-journey must differ from the other journeys")
        }
        guard bindingJourney != signingJourney else {
            throw ValidationError("--binding-journey and --signing-journey must differ")
        }
    }

    static func authenticationType(_ text: String) -> AuthenticationType? {
        switch text.lowercased() {
        case "none": return AuthenticationType.none
        case "application_pin", "app-pin": return .applicationPIN
        case "biometric_only", "biometric-only": return .biometricOnly
        case "biometric_allow_fallback", "biometric-allow-fallback": return .biometricAllowFallback
        default: return nil
        }
    }

    /// The options a tenant may not set: they are the process's (its socket, files, lifetime and `Date` header).
    static let processWideOptions = ["--db", "--port", "--admin-token-file", "--idle-exit", "--parent-pid", "--clock-offset"]

    /// The configuration and the users these options describe.
    func settings(adminToken token: String) throws -> (ReferenceServerConfiguration, [TenantUser]) {
        let oauth = try oauthConfiguration()
        var configuration = ReferenceServerConfiguration(
            databasePath: databasePath, port: port,
            realmPaths: realms.isEmpty ? ["/realms/root"] : realms,
            adminToken: token,
            allowedIssuers: issuers.isEmpty ? ["keymgr"] : issuers,
            journeys: [
                Journey(name: bindingJourney, kind: .deviceBinding(Self.authenticationType(authType) ?? .none)),
                Journey(name: signingJourney, kind: .deviceSigning),
            ] + (usernamelessJourney.map { [Journey(name: $0, kind: .usernamelessSigning)] } ?? []),
            callbackTimeout: callbackTimeout,
            oauth: oauth)
        if clockOffset != 0 {
            let offset = clockOffset
            configuration.clock = { Date().addingTimeInterval(offset) }
            configuration.dateHeaderFollowsClock = true
        }
        configuration.journeyPolicy.maxSavedDevices = maxSavedDevices
        configuration.journeyPolicy.honoursNoSession = !ignoreNoSession
        configuration.journeyPolicy.foreignSigningUsers = foreignSigningUsers.map { $0.split(separator: ",").map(String.init) } ?? []
        configuration.journeyPolicy.foreignBindingUser = foreignBindingUser
        let users = users.map { user in
            let parts = user.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            return TenantUser(username: String(parts[0]), password: String(parts[1]))
        }
        return (configuration, users)
    }

    /// A tenant's settings: this process's options followed by the tenant's own (which win where an option takes one
    /// value, and add where it repeats), the process-wide options refused.
    static func tenantSettings(processArguments: [String], tenantArguments: [String], adminToken: String) throws -> TenantSettings {
        for argument in tenantArguments {
            let name = String(argument.split(separator: "=", maxSplits: 1).first ?? "")
            if processWideOptions.contains(name) {
                throw ReferenceServerError("\(name) is the server's, not a tenant's: start a server of its own to set it")
            }
        }
        let command: RefServerCommand
        do {
            command = try parse(processArguments + tenantArguments)
        } catch {
            throw ReferenceServerError(message(for: error))
        }
        let (configuration, users) = try command.settings(adminToken: adminToken)
        return TenantSettings(configuration: configuration, users: users)
    }

    mutating func run() async throws {
        let token = try adminToken()
        let (base, users) = try settings(adminToken: token)
        var configuration = base
        let processArguments = Array(CommandLine.arguments.dropFirst())
        configuration.tenantConfigurator = { tenantArguments in
            try Self.tenantSettings(processArguments: processArguments, tenantArguments: tenantArguments, adminToken: token)
        }
        let server: ReferenceServer
        do {
            server = try await ReferenceServer.start(configuration: configuration)
        } catch {
            throw ValidationError("\(error)")
        }
        for user in users { try await server.addUser(user.username, password: user.password) }
        FileHandle.standardOutput.write(Data("listening on \(server.baseURL.absoluteString)\n".utf8))

        let reason = await Self.waitForStop(server: server, idleExit: idleExit, parentPid: parentPid)
        FileHandle.standardError.write(Data("keymgr-refserver: stopping (\(reason))\n".utf8))
        await server.stop()
    }

    /// The authorization server's settings from the `--oauth-…` options.
    private func oauthConfiguration() throws -> OAuthServerConfiguration {
        var oauth = OAuthServerConfiguration()
        for path in oauthInitialAccessTokenFile {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw ValidationError("cannot read the initial access token file \(path)")
            }
            let token = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            guard !token.isEmpty else { throw ValidationError("the initial access token file \(path) is empty") }
            oauth.initialAccessTokens.append(token)
        }
        if let oauthTemplates {
            guard let data = FileManager.default.contents(atPath: oauthTemplates) else {
                throw ValidationError("cannot read the templates file \(oauthTemplates)")
            }
            do {
                oauth.templates = try OAuthClientTemplate.templates(fromJSON: data)
            } catch {
                throw ValidationError("\(oauthTemplates): \(error)")
            }
        }
        oauth.issuesTokenBoundTokens = oauthTokenBound
        oauth.requiresDPoPNonce = oauthDpopNonce
        oauth.resourceRequiresDPoPNonce = oauthResourceDpopNonce
        oauth.servesAuthorizationServerMetadata = !oauthOpenidDiscoveryOnly
        oauth.issuerPath = oauthIssuerPath
        oauth.deviceCodeInterval = oauthDeviceInterval
        oauth.refusedRegistrationTokenStatus = oauthRefusedRegistrationTokenStatus
        oauth.adopt(OAuthServerMode(rawValue: oauthMode) ?? .curity)
        return oauth
    }

    /// Reads the admin token, or creates a random one in the token file.
    private func adminToken() throws -> String {
        let path = adminTokenFile ?? databasePath + ".admin-token"
        if let data = FileManager.default.contents(atPath: path) {
            let token = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            guard !token.isEmpty else { throw ValidationError("the admin token file \(path) is empty") }
            return token
        }
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        let token = Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
        guard
            FileManager.default.createFile(
                atPath: path, contents: Data((token + "\n").utf8), attributes: [.posixPermissions: 0o600])
        else { throw ValidationError("cannot write the admin token file \(path)") }
        FileHandle.standardError.write(Data("keymgr-refserver: admin token written to \(path)\n".utf8))
        return token
    }

    /// Returns why the server should stop: a signal, the parent's death, or idleness.
    private static func waitForStop(server: ReferenceServer, idleExit: Double?, parentPid: Int32?) async -> String {
        let (reasons, continuation) = AsyncStream<String>.makeStream()
        var sources: [any DispatchSourceSignal] = []
        for (number, name) in [(SIGTERM, "SIGTERM"), (SIGINT, "SIGINT")] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { continuation.yield(name) }
            source.resume()
            sources.append(source)
        }
        let watcher = Task {
            while !Task.isCancelled {
                try? await Task.sleep(nanoseconds: 250_000_000)
                if let parentPid, kill(parentPid, 0) != 0, errno == ESRCH {
                    continuation.yield("parent \(parentPid) is gone")
                    return
                }
                if let idleExit, Date().timeIntervalSince(await server.lastActivity()) > idleExit {
                    continuation.yield("idle for \(idleExit) s")
                    return
                }
            }
        }
        var iterator = reasons.makeAsyncIterator()
        let reason = await iterator.next() ?? "stream ended"
        watcher.cancel()
        sources.forEach { $0.cancel() }
        return reason
    }
}

/// Runs an async root command (a plain `Command.main()` in top-level code picks the synchronous overload).
func runAsyncCommand<Command: AsyncParsableCommand>(_: Command.Type) async {
    await Command.main(nil)
}

await runAsyncCommand(RefServerCommand.self)
