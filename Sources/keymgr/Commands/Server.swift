import ArgumentParser
import Foundation
import KeyManager
import Sync

/// `keymgr server`: the identity server this device syncs with.
struct Server: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "server",
        abstract: "Configure the identity server keymgr syncs with, or show it.",
        discussion: """
            Example:
              keymgr server set --dialect pingam --base-url https://am.example.com/am \\
                --credential-file /etc/keymgr/admin.token
              keymgr server show
            """,
        subcommands: [Configure.self, Show.self])

    @OptionGroup var globals: GlobalOptions

    /// The one profile the CLI manages.
    static let profileName = "default"


    /// `keymgr server set`: saves the `default` server profile.
    struct Configure: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "set",
            abstract: "Save the identity server's settings (the `default` profile).",
            discussion: """
                Replaces the whole profile: options left out take their defaults. Only settings are stored: the \
                admin token stays in --credential-file (stored as an absolute path, never read here, never shown). \
                Without --credential-file, sync reads $CREDENTIALS_DIRECTORY/keymgr.admin (systemd \
                LoadCredentialEncrypted=). With --credential-header Authorization (the default) the token is sent \
                as `Authorization: Bearer <token>`; with another name, e.g. iPlanetDirectoryPro, as `<NAME>: <token>`. \
                With --json prints the `server show` object.

                Example:
                  keymgr server set --dialect pingam --base-url https://am.example.com/am \\
                    --realm-path /realms/root/realms/alpha \\
                    --credential-file /etc/keymgr/admin.token \\
                    --credential-header iPlanetDirectoryPro
                """)

        @OptionGroup var globals: GlobalOptions

        @Option(help: ArgumentHelp("The server's dialect: pingam (device REST and journeys) or oauth (any OAuth server; curity is another name for it).", valueName: "dialect"))
        var dialect: String

        @Option(help: ArgumentHelp("The server's base URL (http or https), e.g. https://am.example.com/am.", valueName: "url"))
        var baseUrl: String

        @Option(help: ArgumentHelp("PingAM's realm path.", valueName: "path"))
        var realmPath: String = "/realms/root"

        @Option(help: ArgumentHelp("The file holding the admin token (mode 0600).", valueName: "file"), completion: .file())
        var credentialFile: String?

        @Option(help: ArgumentHelp("How the token is sent: Authorization (as a Bearer token) or a header name.", valueName: "name"))
        var credentialHeader: String = "Authorization"

        @Option(help: ArgumentHelp("The OAuth token endpoint.", valueName: "url"))
        var tokenEndpoint: String?

        @Option(help: ArgumentHelp("The dynamic client registration (RFC 7591) endpoint.", valueName: "url"))
        var registrationEndpoint: String?

        @Option(help: ArgumentHelp("The token revocation (RFC 7009) endpoint.", valueName: "url"))
        var revocationEndpoint: String?

        @Option(help: ArgumentHelp("The device authorization (RFC 8628) endpoint.", valueName: "url"))
        var deviceAuthorizationEndpoint: String?

        @Option(help: ArgumentHelp("The OAuth issuer: its endpoints are discovered (RFC 8414, then OpenID discovery); endpoint options override them.", valueName: "url"))
        var issuer: String?

        @Flag var tokenBinding: TokenBindingFlag = .bound

        @Flag(help: "Allow plain http:// to a host other than loopback (the admin token then crosses the network unencrypted).")
        var allowInsecureHttp = false

        func validate() throws {
            guard ServerDialect(name: dialect) != nil else {
                throw ValidationError("--dialect must be pingam or oauth (or curity, another name for oauth), not '\(dialect)'")
            }
            try Self.checkURL(baseUrl, option: "--base-url")
            for (option, value) in [("--issuer", issuer), ("--token-endpoint", tokenEndpoint), ("--registration-endpoint", registrationEndpoint),
                                    ("--revocation-endpoint", revocationEndpoint),
                                    ("--device-authorization-endpoint", deviceAuthorizationEndpoint)] {
                if let value { try Self.checkURL(value, option: option) }
            }
            guard !credentialHeader.isEmpty, credentialHeader.unicodeScalars.allSatisfy(Self.isHeaderNameCharacter) else {
                throw ValidationError("--credential-header must be an HTTP header name such as Authorization or iPlanetDirectoryPro")
            }
            if let credentialFile, credentialFile.isEmpty {
                throw ValidationError("--credential-file needs a path")
            }
        }

        func run() throws {
            try ServerSettings.checkRealmPath(realmPath)  // before discovery talks to the issuer
            let console = globals.console
            let credentialPath = credentialFile.map(Self.absolutePath)
            if let credentialPath { Self.checkCredentialFile(credentialPath, console: console) }
            let manager = try globals.openManager()
            // `https://am.example.com/am/` and `…/am` are one server: keep the form without trailing slashes.
            var base = baseUrl
            while base.hasSuffix("/") { base.removeLast() }
            guard let dialect = ServerDialect(name: dialect), let baseURL = URL(string: base) else {
                throw KeyManagerError(.usage, "--dialect and --base-url must be given")  // validate() checked both
            }
            var settings = ServerSettings(
                name: Server.profileName, dialect: dialect, baseURL: baseURL, realmPath: realmPath,
                credentialFile: credentialPath, credentialHeader: credentialHeader,
                tokenEndpoint: tokenEndpoint.flatMap(URL.init(string:)),
                registrationEndpoint: registrationEndpoint.flatMap(URL.init(string:)),
                revocationEndpoint: revocationEndpoint.flatMap(URL.init(string:)),
                deviceAuthorizationEndpoint: deviceAuthorizationEndpoint.flatMap(URL.init(string:)),
                tokenBinding: tokenBinding.tokenBinding, allowInsecureHTTP: allowInsecureHttp)
            if let issuer = issuer.flatMap(URL.init(string:)) {
                let explicit = settings
                settings = try AsyncBridge.wait { try await DiscoveryService().complete(explicit, issuer: issuer) }
            }
            try manager.configureServer(settings)
            guard let saved = try manager.serverSettings(name: Server.profileName) else {
                throw KeyManagerError(.failure, "the server profile was not saved")
            }
            if globals.json {
                console.answer(json: ServerSettingsJSON(saved))
            } else {
                console.confirm("saved the \(saved.name) server profile: \(saved.dialect.rawValue) at \(saved.baseURL.absoluteString)")
            }
        }

        /// An http or https URL with a host, and no user name or password in it (secrets belong in the credential file).
        static func checkURL(_ text: String, option: String) throws {
            guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(),
                  scheme == "http" || scheme == "https", let host = components.host, !host.isEmpty else {
                throw ValidationError("\(option) must be an http or https URL with a host, such as https://am.example.com/am")
            }
            guard components.user == nil, components.password == nil else {
                throw ValidationError("\(option) must not carry a user name or password: put the admin token in --credential-file")
            }
            guard components.fragment == nil else {
                throw ValidationError("\(option) must not have a #fragment")
            }
        }

        /// RFC 9110 token characters.
        static func isHeaderNameCharacter(_ scalar: Unicode.Scalar) -> Bool {
            guard scalar.isASCII else { return false }
            if CharacterSet.alphanumerics.contains(scalar) { return true }
            return "!#$%&'*+-.^_`|~".unicodeScalars.contains(scalar)
        }

        /// `path` made absolute against the working directory, with `.` and `..` resolved.
        static func absolutePath(_ path: String) -> String {
            let expanded = (path as NSString).expandingTildeInPath
            let base = URL(fileURLWithPath: FileManager.default.currentDirectoryPath, isDirectory: true)
            return URL(fileURLWithPath: expanded, relativeTo: base).standardizedFileURL.path
        }

        /// Warns when the credential file is missing or others may read it; never reads the token.
        static func checkCredentialFile(_ path: String, console: Console) {
            var info = stat()
            guard stat(path, &info) == 0 else {
                console.warn("the credential file \(path) does not exist yet: sync will fail until it holds the admin token")
                return
            }
            if info.st_mode & 0o044 != 0 {
                console.warn("the credential file \(path) is readable by other users (mode \(String(info.st_mode & 0o777, radix: 8))): run `chmod 600 \(path)`")
            }
        }
    }

    /// `keymgr server show`: the saved profile, without the credential.
    struct Show: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "show",
            abstract: "Show the identity server's settings.",
            usage: "keymgr server show [<options>]",
            discussion: """
                The admin token is never shown, only where it is read from. With --json: \
                {"name", "dialect", "baseUrl", "realmPath", "credentialFile", "credentialHeader", "tokenEndpoint",\
                "registrationEndpoint", "revocationEndpoint", "deviceAuthorizationEndpoint", "tokenBinding", "updatedAt"}.

                Example:
                  keymgr server show --json
                """)

        @OptionGroup var globals: GlobalOptions

        func run() throws {
            let manager = try globals.openManager(readOnly: true)
            guard let settings = try manager.serverSettings(name: Server.profileName) else {
                throw KeyManagerError(.config, "no server is configured: run `keymgr server set --dialect pingam --base-url URL --credential-file F`")
            }
            let console = globals.console
            if globals.json {
                console.answer(json: ServerSettingsJSON(settings))
                return
            }
            let lines: [(String, String)] = [
                ("name", settings.name),
                ("dialect", settings.dialect.rawValue),
                ("base URL", settings.baseURL.absoluteString),
                ("realm path", settings.realmPath),
                ("credential file", settings.credentialFile ?? "$CREDENTIALS_DIRECTORY/keymgr.admin"),
                ("credential header", settings.credentialHeader),
                ("token endpoint", HumanText.text(settings.tokenEndpoint?.absoluteString)),
                ("registration endpoint", HumanText.text(settings.registrationEndpoint?.absoluteString)),
                ("revocation endpoint", HumanText.text(settings.revocationEndpoint?.absoluteString)),
                ("device authorization endpoint", HumanText.text(settings.deviceAuthorizationEndpoint?.absoluteString)),
                ("token binding", settings.tokenBinding.rawValue),
                ("updated", HumanText.time(settings.updatedAt)),
            ]
            let width = lines.map(\.0.count).max() ?? 0
            console.answer(lines.map { $0.0 + String(repeating: " ", count: width - $0.0.count + 2) + TextTable.printable($0.1) }
                .joined(separator: "\n"))
        }
    }
}
