import ArgumentParser
import Foundation
import Glibc
import KeyManager
import Sync

/// `keymgr server`: the identity server this device syncs with.
struct Server: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "server",
        abstract: "Configure the identity servers keymgr talks to (profiles), or show them.",
        discussion: """
            A store keeps one profile per server, named with --profile (default: `default`); the commands \
            that talk to a server take --profile too. At most one profile may be a PingAM server (the device \
            registry the store's keys are registered at); the others are OAuth servers.

            Example:
              keymgr server set --dialect pingam --base-url https://am.example.com/am \\
                --credential-file /etc/keymgr/admin.token
              keymgr server set --profile curity --dialect oauth \\
                --base-url https://idp.example.com \\
                --issuer https://idp.example.com/oauth/v2/oauth-anonymous
              keymgr server list
              keymgr server show --profile curity
            """,
        subcommands: [Configure.self, Show.self, ListProfiles.self, Remove.self])

    @OptionGroup var globals: GlobalOptions

    /// The profile a command uses when no --profile is given.
    static let profileName = "default"


    /// `keymgr server set`: saves the `default` server profile.
    struct Configure: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "set",
            abstract: "Create a server profile, or change the settings given in one.",
            usage: "keymgr server set [--profile <name>] [--dialect <dialect>]\n       [--base-url <url>] [<options>]",
            discussion: """
                Changes only the options given: the rest of the profile stays as it was (a new profile needs \
                --dialect and --base-url, or --issuer, and takes the defaults for the rest). With --issuer the \
                endpoints are discovered again; endpoint options given in the same run win. Only settings are stored: the \
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

        @OptionGroup var server: ProfileOptions

        @Option(help: ArgumentHelp("The server's dialect: pingam (device REST and journeys) or oauth (any OAuth server; curity is another name for it).", valueName: "dialect"))
        var dialect: String?

        @Option(help: ArgumentHelp("The server's base URL (http or https), e.g. https://am.example.com/am; an oauth profile may give only --issuer.", valueName: "url"))
        var baseUrl: String?

        @Option(help: ArgumentHelp("PingAM's realm path (a new profile: /realms/root).", valueName: "path"))
        var realmPath: String?

        @Option(help: ArgumentHelp("The file holding the admin token (mode 0600).", valueName: "file"), completion: .file())
        var credentialFile: String?

        @Option(help: ArgumentHelp("How the token is sent: Authorization (as a Bearer token; a new profile's) or a header name.", valueName: "name"))
        var credentialHeader: String?

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

        @Flag var tokenBinding: TokenBindingFlag?

        @Flag(inversion: .prefixedNo,
              help: "Allow plain http:// to a host other than loopback (the admin token then crosses the network unencrypted).")
        var allowInsecureHttp: Bool?

        func validate() throws {
            if let dialect, DialectName(name: dialect) == nil {
                throw ValidationError("--dialect must be \(DialectName.accepted), not '\(dialect)'")
            }
            for (option, value) in [("--base-url", baseUrl), ("--issuer", issuer), ("--token-endpoint", tokenEndpoint), ("--registration-endpoint", registrationEndpoint),
                                    ("--revocation-endpoint", revocationEndpoint),
                                    ("--device-authorization-endpoint", deviceAuthorizationEndpoint)] {
                if let value { try Self.checkURL(value, option: option) }
            }
            if let credentialHeader, credentialHeader.isEmpty || !credentialHeader.unicodeScalars.allSatisfy(Self.isHeaderNameCharacter) {
                throw ValidationError("--credential-header must be an HTTP header name such as Authorization or iPlanetDirectoryPro")
            }
            if let credentialFile, credentialFile.isEmpty {
                throw ValidationError("--credential-file needs a path")
            }
        }

        func run(in context: CommandContext) throws {
            if let realmPath { try ServerSettings.checkRealmPath(realmPath) }  // before discovery talks to the issuer
            let console = globals.console(in: context)
            // The profile keeps the path, and sync reads the file when it runs, as whoever runs it (through the
            // agent: the agent's user). Through the agent, the caller proves now that they may read it (the client
            // opened it) and the agent's user must see that same file.
            if let credentialFile, context.request.isServed {
                try Self.checkTheAgentReadsTheCallersFile(
                    NamedFile.open(credentialFile, option: "--credential-file", access: .read, for: context.request))
            }
            let credentialPath = credentialFile.map(Self.absolutePath)
            if let credentialPath { Self.checkCredentialFile(credentialPath, console: console) }
            let manager = try globals.openManager(in: context)
            let url = { (text: String?) in text.flatMap(URL.init(string:)) }
            var change = ServerSettingsChange()
            change.dialect = dialect.flatMap(DialectName.init(name:))
            change.baseURL = url(baseUrl)
            change.issuer = url(issuer)
            change.realmPath = realmPath
            change.credentialFile = credentialPath
            change.credentialHeader = credentialHeader
            change.tokenEndpoint = url(tokenEndpoint)
            change.registrationEndpoint = url(registrationEndpoint)
            change.revocationEndpoint = url(revocationEndpoint)
            change.deviceAuthorizationEndpoint = url(deviceAuthorizationEndpoint)
            change.tokenBinding = tokenBinding?.tokenBinding
            change.allowInsecureHTTP = allowInsecureHttp
            let (profile, proposed) = (server.profile, change)
            let saved = try AsyncBridge.wait { try await DiscoveryService().configure(manager, name: profile, proposed) }
            try globals.render(ServerProfileOutput(settings: saved, saved: true), in: context)
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

        /// Through the agent: the credential file the caller opened (`file`, their rights) is the one the agent's
        /// user will read at each sync, at the same absolute path. Never reads the token.
        /// - Throws: `badInput` (65) naming whose rights failed, or why the two are not the same file.
        static func checkTheAgentReadsTheCallersFile(_ file: NamedFile) throws {
            let path = file.name
            guard path.hasPrefix("/") else {
                throw CommandFailure(.badInput, "--credential-file \(path): give it as an absolute path: the profile keeps "
                    + "the path, and sync reads it later as the agent, which does not know your working directory")
            }
            let agentUser = "the agent's user \(AgentCaller.loginName(uid: geteuid())) (uid \(geteuid()))"
            let own = Glibc.open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)
            guard own >= 0 else {
                let reason = String(cString: strerror(errno))
                throw CommandFailure(.badInput, "you may read \(path), but sync reads it later as \(agentUser), who cannot "
                    + "(\(reason)): let that user read it (e.g. `setfacl -m u:\(AgentCaller.loginName(uid: geteuid())):r "
                    + "\(path)`), or give the token to the agent as its systemd credential keymgr.admin and leave out "
                    + "--credential-file")
            }
            defer { close(own) }
            var callers = stat()
            var agents = stat()
            guard fstat(file.descriptor, &callers) == 0, fstat(own, &agents) == 0,
                  callers.st_dev == agents.st_dev, callers.st_ino == agents.st_ino else {
                throw CommandFailure(.badInput, "\(path) is not the same file for you and for \(agentUser), which reads it "
                    + "at each sync (it sees another file there, e.g. in its private /tmp): keep the credential file "
                    + "where both see it, such as /etc/keymgr/admin.token")
            }
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
            usage: "keymgr server show [--profile <name>] [<options>]",
            discussion: """
                The admin token is never shown, only where it is read from. With --json: \
                {"name", "dialect", "baseUrl", "realmPath", "credentialFile", "credentialHeader", "tokenEndpoint",\
                "registrationEndpoint", "revocationEndpoint", "deviceAuthorizationEndpoint", "tokenBinding", "updatedAt"}.

                Example:
                  keymgr server show --json
                """)

        @OptionGroup var globals: GlobalOptions

        @OptionGroup var server: ProfileOptions

        func run(in context: CommandContext) throws {
            let manager = try globals.openManager(in: context, readOnly: true)
            try globals.render(ServerProfileOutput(settings: try manager.serverProfile(name: server.profile), saved: false), in: context)
        }
    }

    /// `keymgr server list`: every profile.
    struct ListProfiles: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "list",
            abstract: "List the server profiles.",
            discussion: """
                One line per profile: name, dialect, base URL. With --json: an array of `server show` objects.

                Example:
                  keymgr server list
                """)

        @OptionGroup var globals: GlobalOptions

        func run(in context: CommandContext) throws {
            let profiles = try globals.openManager(in: context, readOnly: true).serverProfiles()
            try globals.render(ServerProfilesOutput(profiles: profiles), in: context)
        }
    }

    /// `keymgr server remove`: deletes a profile and what is kept here for it.
    struct Remove: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "remove",
            abstract: "Remove a server profile, with the client registrations and tokens kept for it here.",
            usage: "keymgr server remove --profile <name> [--yes] [<options>]",
            discussion: """
                Nothing is sent to the server: delete clients there first with `keymgr dcr delete --profile NAME`. \
                On a terminal keymgr asks first (--yes does not ask; no exits 1, code declined); without one it \
                never asks. A profile that does not exist fails (66) before anything is asked. Audited as \
                server.removed. With --json: {"name", "registrations", "tokenSets"}.

                Example:
                  keymgr server remove --profile curity
                """)

        @OptionGroup var globals: GlobalOptions

        @Option(help: ArgumentHelp("The profile to remove.", valueName: "name"))
        var profile: String

        @OptionGroup var confirmation: ConfirmationOptions

        func run(in context: CommandContext) throws {
            let manager = try globals.openManager(in: context)
            let removal = try manager.removeServer(name: profile) { plan in
                try confirmation.confirm("Remove the server profile \(plan.name) and wipe the \(plan.registrations) client "
                    + "registrations and \(plan.tokenSets) token sets kept for it here?", in: context)
            }
            try globals.render(ServerRemovalOutput(removal: removal), in: context)
        }
    }
}

/// `server remove --json`.
struct ServerRemovalJSON: Encodable {
    let name: String
    let registrations: Int
    let tokenSets: Int
}

/// `server set` (a confirmation line) and `server show` (`name  value` lines); with --json the `server show` object.
struct ServerProfileOutput: DocumentOutput {
    let settings: ServerSettings
    /// `server set` just saved it.
    let saved: Bool

    var document: ServerSettingsJSON { ServerSettingsJSON(settings) }

    func text(on console: Console) {
        if saved {
            console.confirm("saved the \(settings.name) server profile: \(settings.dialect.rawValue) at \(settings.baseURL.absoluteString)")
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
        console.answer(TokenShowOutput.aligned(lines))
    }
}

/// `server list`: a table, or an array of `server show` objects.
struct ServerProfilesOutput: DocumentOutput {
    let profiles: [ServerSettings]

    var document: [ServerSettingsJSON] { profiles.map(ServerSettingsJSON.init) }

    func text(on console: Console) {
        console.table([.whole("PROFILE"), .whole("DIALECT"), TableColumn("BASE URL")],
                      profiles.map { [$0.name, $0.dialect.rawValue, $0.baseURL.absoluteString] },
                      empty: "no server is configured: run `keymgr server set`", wide: true)
    }
}

/// `server remove`: a confirmation line, or `{"name","registrations","tokenSets"}`.
struct ServerRemovalOutput: DocumentOutput {
    let removal: ServerRemoval

    var document: ServerRemovalJSON {
        ServerRemovalJSON(name: removal.name, registrations: removal.registrations, tokenSets: removal.tokenSets)
    }

    func text(on console: Console) {
        console.confirm("removed the server profile \(removal.name) (\(removal.registrations) client "
            + "registrations and \(removal.tokenSets) token sets wiped here)")
    }
}
