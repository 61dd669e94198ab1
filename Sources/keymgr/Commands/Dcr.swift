import ArgumentParser
import Foundation
import KeyManager
import Sync

/// `keymgr dcr`: each user's own OAuth client (RFC 7591 Dynamic Client Registration, RFC 7592 management).
struct Dcr: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dcr",
        abstract: "Register, show or delete a user's OAuth client (Dynamic Client Registration).",
        discussion: """
            Each user on the device gets a client of their own (Curity's mobile DCR pattern), so one user's client \
            can be revoked alone. Secrets are stored sealed and shown only with --reveal.

            Example:
              keymgr dcr register --user alice --software-id keymgr-template \\
                --initial-access-token-file /etc/keymgr/dcr.token
              keymgr dcr show --user alice
            """,
        subcommands: [Register.self, Show.self, Delete.self, Forget.self])

    @OptionGroup var globals: GlobalOptions

    struct Register: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "register",
            abstract: "Register an OAuth client for a user (RFC 7591).",
            usage: "keymgr dcr register --user <id> (--software-id <t> | --metadata <f>)\n       [--initial-access-token-file <f>] [--scope <scope>] [<options>]",
            discussion: """
                With --software-id the server fills the metadata from its template client (Curity's templatized \
                DCR); with --metadata FILE the file holds full RFC 7591 client metadata (any server). The device's \
                name and platform go along as metadata where the request leaves them free. The initial access \
                token is read from --initial-access-token-file, never from arguments. Every member of the answer \
                is stored; the client secret and registration access token sealed. When the granted grant_types \
                lack the device grant or refresh_token, a warning names what `keymgr login` will need. With --json \
                prints the `dcr show` object with "warnings" (an array of those, empty when none).

                Example:
                  keymgr dcr register --user alice --software-id keymgr-template \\
                    --initial-access-token-file /etc/keymgr/dcr.token
                """)

        @OptionGroup var globals: GlobalOptions

        @OptionGroup var network: NetworkOptions

        @Option(help: ArgumentHelp("The user the client is for.", valueName: "id"),
                completion: .custom(StoreCompletion.users))
        var user: String

        @Option(help: ArgumentHelp("The template client to copy (Curity's software_id).", valueName: "template"))
        var softwareId: String?

        @Option(help: ArgumentHelp("A file with full RFC 7591 client metadata (a JSON object).", valueName: "file"), completion: .file())
        var metadata: String?

        @Option(help: ArgumentHelp("A file holding the initial access token.", valueName: "file"), completion: .file())
        var initialAccessTokenFile: String?

        @Option(help: ArgumentHelp("The scope to ask for.", valueName: "scope"))
        var scope: String?

        func validate() throws {
            guard (softwareId == nil) != (metadata == nil) else {
                throw ValidationError("give exactly one of --software-id TEMPLATE and --metadata FILE")
            }
        }

        func run(in context: CommandContext) throws {
            var document: [String: JSONValue]?
            if let metadata {
                let data = try NamedFile.open(metadata, option: "--metadata", access: .read, for: context.request).contents()
                guard let object = (try? JSONDecoder().decode(JSONValue.self, from: data))?.objectValue else {
                    throw CommandFailure(.badInput, "\(metadata) must hold a JSON object of RFC 7591 client metadata")
                }
                document = object
            }
            var initialAccessToken: String?
            if let initialAccessTokenFile {
                let text = String(decoding: try NamedFile.open(initialAccessTokenFile, option: "--initial-access-token-file", access: .read, for: context.request).contents(), as: UTF8.self)
                    .trimmingCharacters(in: .whitespacesAndNewlines)
                guard !text.isEmpty, !text.contains("\n") else {
                    throw CommandFailure(.badInput, "\(initialAccessTokenFile) must hold one token on one line")
                }
                initialAccessToken = text
            }
            let oauth = try OAuthContext(globals, profile: network.profile, timeout: network.timeout, in: context)
            let service = oauth.registrations
            let (user, softwareId, scope) = (user, softwareId, scope)
            let (document2, token) = (document, initialAccessToken)
            let registration = try AsyncBridge.wait {
                try await service.register(userId: user, softwareId: softwareId, metadata: document2, scope: scope,
                                           initialAccessToken: token)
            }
            let warnings = RegistrationService.loginWarnings(registration)
            for warning in warnings { globals.console(in: context).warn(warning) }
            try globals.render(RegistrationOutput(registration: registration, secrets: nil,
                                                  confirmation: "registered client \(registration.clientId) for \(user)",
                                                  warnings: warnings), in: context)
        }
    }

    struct Show: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "show",
            abstract: "Show a user's client registration.",
            usage: "keymgr dcr show [<options>] --user <id> [--server] [--reveal]",
            discussion: """
                Prints the copy stored here, as the last registration, read or sync left it. With --server \
                keymgr first reads the registration at the server (RFC 7592) and stores what it answers, \
                rotated credentials included, as `keymgr sync` does; a client the server no longer knows (401) \
                is wiped here, as sync wipes it.

                With --json:
                  {"userId","clientId","registrationClientUri","clientIdIssuedAt",
                   "clientSecretExpiresAt","tokenEndpointAuthMethod","grantTypes","scope",
                   "softwareId","clientSecret","metadata"}
                clientSecret is null unless --reveal, which also adds "registrationAccessToken". \
                metadata holds every other member the server answered with.

                Example:
                  keymgr dcr show --user alice --json
                """)

        @OptionGroup var globals: GlobalOptions

        @OptionGroup var server: ProfileOptions

        @Option(help: ArgumentHelp("The user.", valueName: "id"), completion: .custom(StoreCompletion.users))
        var user: String

        @Flag(help: "Show the client secret and the registration access token.")
        var reveal = false

        @Flag(name: .customLong("server"), help: "Read the registration at the server first (RFC 7592) and store it.")
        var readServer = false

        func run(in context: CommandContext) throws {
            let found: (registration: Registration, secrets: RegistrationSecrets?)
            if readServer {
                let service = try OAuthContext(globals, profile: server.profile, in: context).registrations
                let (user, profile, reveal) = (user, server.profile, reveal)
                found = try AsyncBridge.wait { try await service.readAtServer(userId: user, profile: profile, revealing: reveal) }
            } else {
                found = try globals.openManager(in: context).clientRegistration(userId: user, profile: server.profile, revealing: reveal)
            }
            try globals.render(RegistrationOutput(registration: found.registration, secrets: found.secrets, confirmation: nil), in: context)
        }
    }

    struct Delete: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "delete",
            abstract: "Delete a user's client at the server (RFC 7592), and its tokens here.",
            usage: "keymgr dcr delete [<options>] --user <id> [--yes]",
            discussion: """
                Deletes the client at the server (already gone is fine), then the registration, the tokens and \
                the DPoP key here. On a terminal keymgr asks first (--yes does not ask; no exits 1, code \
                declined); without one it never asks. A user with no registration fails (66) before anything is asked.

                Example:
                  keymgr dcr delete --user alice
                """)

        @OptionGroup var globals: GlobalOptions

        @OptionGroup var network: NetworkOptions

        @Option(help: ArgumentHelp("The user.", valueName: "id"), completion: .custom(StoreCompletion.users))
        var user: String

        @OptionGroup var confirmation: ConfirmationOptions

        func run(in context: CommandContext) throws {
            let service = try OAuthContext(globals, profile: network.profile, timeout: network.timeout, in: context).registrations
            let (user, confirmation) = (user, confirmation)
            try AsyncBridge.wait {
                try await service.delete(userId: user) { registration in
                    try confirmation.confirm("Delete the OAuth client \(registration.clientId) of \(user) at the server, and its tokens here?", in: context)
                }
            }
            globals.console(in: context).confirm("deleted the client registration of \(user)")
        }
    }
}

extension Dcr {
    /// `keymgr dcr forget`: the way out when the server's answers no longer say whether the client exists.
    struct Forget: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "forget",
            abstract: "Remove a user's client registration here only, without asking the server.",
            usage: "keymgr dcr forget [<options>] --user <id> [--yes]",
            discussion: """
                For a client the server deleted but whose registration access token it refuses other than with \
                401 (Authlib answers 400 access_denied), so neither `keymgr sync` nor `keymgr dcr delete` can \
                tell that it is gone. Removes the registration, the tokens and the DPoP key here; no request \
                goes to the server. Audited as dcr.forgotten. On a terminal keymgr asks first (--yes does not \
                ask). A user with no registration fails (66).

                Example:
                  keymgr dcr forget --user alice
                  keymgr dcr register --user alice --software-id keymgr-template
                """)

        @OptionGroup var globals: GlobalOptions

        @OptionGroup var server: ProfileOptions

        @Option(help: ArgumentHelp("The user.", valueName: "id"), completion: .custom(StoreCompletion.users))
        var user: String

        @OptionGroup var confirmation: ConfirmationOptions

        func run(in context: CommandContext) throws {
            let service = try OAuthContext(globals, profile: server.profile, in: context).registrations
            let (user, confirmation) = (user, confirmation)
            try AsyncBridge.wait {
                try await service.forget(userId: user) { registration in
                    try confirmation.confirm("Remove the OAuth client \(registration.clientId) of \(user) here, "
                        + "without asking the server?", in: context)
                }
            }
            globals.console(in: context).confirm("removed the client registration of \(user) here; the server was not asked")
        }
    }
}

/// `dcr show --json`.
struct RegistrationJSON: Encodable {
    let userId: String
    let clientId: String
    @Nullable var registrationClientUri: String?
    @Nullable var clientIdIssuedAt: Date?
    @Nullable var clientSecretExpiresAt: Date?
    @Nullable var tokenEndpointAuthMethod: String?
    let grantTypes: [String]
    @Nullable var scope: String?
    @Nullable var softwareId: String?
    @Nullable var clientSecret: String?
    /// Only with --reveal.
    let registrationAccessToken: String?
    let metadata: JSONValue
    /// Only from `dcr register`: what the registration lacks for `keymgr login`.
    let warnings: [String]?

    init(_ registration: Registration, secrets: RegistrationSecrets?, warnings: [String]? = nil) {
        self.warnings = warnings
        userId = registration.userId
        clientId = registration.clientId
        registrationClientUri = registration.registrationClientURI?.absoluteString
        clientIdIssuedAt = registration.clientIdIssuedAt
        clientSecretExpiresAt = registration.clientSecretExpiresAt
        tokenEndpointAuthMethod = registration.tokenEndpointAuthMethod
        grantTypes = registration.grantTypes
        scope = registration.scope
        softwareId = registration.softwareId
        clientSecret = secrets?.clientSecret
        registrationAccessToken = secrets?.registrationAccessToken
        metadata = .object(registration.metadata)
    }
}
