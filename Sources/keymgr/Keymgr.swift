import ArgumentParser

/// The root command: `keymgr <subcommand>`. New subcommands (server, sync, admin, dcr, token, dpop, login)
/// are added to `subcommands`, each in its own file under `Commands/`.
struct Keymgr: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keymgr",
        abstract: "Per-user device-bound P-256 keys for many users on one shared Linux device.",
        discussion: """
            keymgr keeps each user's device-bound signing keys (Ping Identity Device Binding model) in one \
            encrypted SQLite store. Results go to stdout (with --json: exactly one JSON document); \
            confirmations, prompts, warnings and errors go to stderr. PINs are read from a no-echo prompt, \
            --pin-stdin or --pin-fd, never from arguments or the environment.

            Example:
              keymgr --home /var/lib/keymgr init --device-name "kiosk 7"
              printf '482916\\n' | keymgr bind --user alice --auth-type app-pin --pin-stdin
              keymgr server set --dialect pingam --base-url https://am.example.com/am \\
                --credential-file /etc/keymgr/admin.token
              keymgr sync

            Exit status: 0 success, 1 failure (also a confirmation answered no: code declined), 2 sync finished but some users could not be reconciled, \
            3 sync safety valve (nothing applied), 64 usage, 65 bad input data, 66 no such user or key, \
            69 server or verifier unavailable, 75 busy or timed out (try again), 76 server rejected, \
            77 not authenticated (wrong PIN, locked, aborted; denied by the agent's policy), 78 configuration error.
            """,
        version: KeymgrVersion.current,
        subcommands: [
            Init.self, Status.self, Users.self, List.self, Bind.self, Sign.self, Rebind.self, Revoke.self,
            Pin.self, Audit.self, Server.self, SyncCommand.self, Admin.self, Master.self, Dcr.self, Token.self, Dpop.self,
            Login.self, Config.self, Export.self, TPM.self, DoctorCommand.self, AgentCommand.self, Person.self,
        ])

    @OptionGroup var globals: GlobalOptions
}

/// A command that does keymgr's work (as opposed to a group or the argument parser's own help command):
/// its errors are reported with keymgr's codes and exit statuses.
///
/// `KeymgrMain` runs it with `run(in:)`, for one request (`CommandContext`: the caller and the policy's decision,
/// the request's streams, terminal and environment); the argument parser's `run()` is never called for it.
protocol KeymgrCommand: ParsableCommand {
    /// Does the command's work for the request `context` describes.
    func run(in context: CommandContext) throws
}
