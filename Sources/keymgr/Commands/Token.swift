import ArgumentParser
import Foundation
import KeyManager
import Sync

/// `keymgr token`: a user's OAuth tokens, stored sealed with the DPoP key they are bound to.
struct Token: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Import, show, refresh, revoke or print a user's OAuth tokens.",
        discussion: """
            Refreshes are single-flight across processes: two processes never spend one refresh token, and both \
            end with the new tokens. A refresh the server refuses (invalid_grant) discards the tokens and the DPoP \
            key: run `keymgr login` again.

            Example:
              keymgr token print --user alice --min-ttl 120
              keymgr token show --user alice
            """,
        subcommands: [Import.self, Show.self, Refresh.self, Revoke.self, Print.self])

    @OptionGroup var globals: GlobalOptions

    struct Import: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "import",
            abstract: "Store a token response (RFC 6749 JSON on stdin) for a user.",
            usage: "keymgr token import [<options>] --user <id> < response.json",
            discussion: """
                The tokens were issued elsewhere, so keymgr holds no DPoP key for them: they are stored as unbound. \
                A --bound profile refuses Bearer tokens (exit 76).

                Example:
                  keymgr token import --user alice < response.json
                """)

        @OptionGroup var globals: GlobalOptions

        @OptionGroup var server: ProfileOptions

        @Option(help: ArgumentHelp("The user.", valueName: "id"), completion: .custom(StoreCompletion.users))
        var user: String

        func run(in context: CommandContext) throws {
            let oauth = try OAuthContext(globals, profile: server.profile, in: context)
            let set = try oauth.tokens.importTokens(userId: user, json: context.readInput())
            try globals.render(TokenSetOutput(set: set, confirmation: "stored \(set.tokenType) tokens for \(user)"), in: context)
        }
    }

    struct Show: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "show",
            abstract: "Show a user's tokens, redacted unless --reveal.",
            usage: "keymgr token show [<options>] --user <id> [--reveal]",
            discussion: """
                With --json:
                  {"userId","tokenType","scope","expiresAt","bound","jkt","accessToken",
                   "refreshToken","idToken"}
                the three tokens are null unless --reveal.

                Example:
                  keymgr token show --user alice --json
                """)

        @OptionGroup var globals: GlobalOptions

        @OptionGroup var server: ProfileOptions

        @Option(help: ArgumentHelp("The user.", valueName: "id"), completion: .custom(StoreCompletion.users))
        var user: String

        @Flag(help: "Show the token strings.")
        var reveal = false

        func run(in context: CommandContext) throws {
            let manager = try globals.openManager(in: context, readOnly: true)
            let tokens = try manager.tokens(userId: user, profile: server.profile, revealing: reveal)
            try globals.render(TokenShowOutput(set: tokens.set, secrets: tokens.secrets), in: context)
        }
    }

    struct Refresh: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "refresh",
            abstract: "Refresh a user's tokens now (single-flight across processes).",
            usage: "keymgr token refresh [<options>] --user <id>",
            discussion: """
                With --json prints the `token show` object (tokens null).

                Example:
                  keymgr token refresh --user alice
                """)

        @OptionGroup var globals: GlobalOptions

        @OptionGroup var network: NetworkOptions

        @Option(help: ArgumentHelp("The user.", valueName: "id"), completion: .custom(StoreCompletion.users))
        var user: String

        func run(in context: CommandContext) throws {
            let service = try OAuthContext(globals, profile: network.profile, timeout: network.timeout, in: context).tokens
            let user = user
            let set = try AsyncBridge.wait { try await service.refresh(userId: user) }
            try globals.render(TokenSetOutput(set: set, confirmation: "refreshed the tokens of \(user); they expire \(HumanText.time(set.expiresAt))"), in: context)
        }
    }

    struct Revoke: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "revoke",
            abstract: "Revoke a user's tokens at the server (RFC 7009) and here.",
            usage: "keymgr token revoke [<options>] --user <id> [--yes]",
            discussion: """
                Revokes the refresh and access tokens at the server, then discards them and the DPoP key here. \
                On a terminal keymgr asks first (--yes does not ask; no exits 1, code declined); without one it \
                never asks. A user with no tokens fails (66) before anything is asked.

                Example:
                  keymgr token revoke --user alice
                """)

        @OptionGroup var globals: GlobalOptions

        @OptionGroup var network: NetworkOptions

        @Option(help: ArgumentHelp("The user.", valueName: "id"), completion: .custom(StoreCompletion.users))
        var user: String

        @OptionGroup var confirmation: ConfirmationOptions

        func run(in context: CommandContext) throws {
            let service = try OAuthContext(globals, profile: network.profile, timeout: network.timeout, in: context).tokens
            let (user, confirmation) = (user, confirmation)
            try AsyncBridge.wait {
                try await service.revoke(userId: user) { _ in
                    try confirmation.confirm("Revoke the tokens of \(user) at the server and discard them here?", in: context)
                }
            }
            globals.console(in: context).confirm("revoked the tokens of \(user)")
        }
    }

    struct Print: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "print",
            abstract: "Print a valid access token for scripts, refreshing it first when it expires soon.",
            usage: "keymgr token print [<options>] --user <id> [--min-ttl <s>]",
            discussion: """
                Writes the access token and a newline to stdout. With --json: {"accessToken","tokenType","expiresAt"}.

                Example:
                  keymgr token print --user alice --min-ttl 120
                """)

        @OptionGroup var globals: GlobalOptions

        @OptionGroup var network: NetworkOptions

        @Option(help: ArgumentHelp("The user.", valueName: "id"), completion: .custom(StoreCompletion.users))
        var user: String

        @Option(help: ArgumentHelp("Refresh first when the token expires within this many seconds (default: 60).", valueName: "s"))
        var minTtl: Double = 60

        func validate() throws {
            try DurationOption.check(minTtl, "--min-ttl", within: 0...(86_400 * 365), exclusiveLower: false)
        }

        func run(in context: CommandContext) throws {
            let service = try OAuthContext(globals, profile: network.profile, timeout: network.timeout, in: context).tokens
            let (user, minTtl) = (user, minTtl)
            let result = try AsyncBridge.wait { try await service.accessToken(userId: user, minTTL: minTtl) }
            try globals.render(PrintedTokenOutput(token: result.token, set: result.set), in: context)
        }
    }
}

/// `token show --json`.
struct TokenSetJSON: Encodable {
    let userId: String
    let tokenType: String
    @Nullable var scope: String?
    @Nullable var expiresAt: Date?
    let bound: Bool
    @Nullable var jkt: String?
    @Nullable var accessToken: String?
    @Nullable var refreshToken: String?
    @Nullable var idToken: String?

    init(_ set: TokenSet, secrets: TokenSecrets?) {
        userId = set.userId
        tokenType = set.tokenType
        scope = set.scope
        expiresAt = set.expiresAt
        bound = set.bound
        jkt = set.jkt
        accessToken = secrets?.accessToken
        refreshToken = secrets?.refreshToken
        idToken = secrets?.idToken
    }
}

/// `token print --json`.
struct PrintedTokenJSON: Encodable {
    let accessToken: String
    let tokenType: String
    @Nullable var expiresAt: Date?
}
