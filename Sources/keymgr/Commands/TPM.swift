import ArgumentParser
import KeyManager

/// `keymgr tpm`: the TPM a TPM store keeps its keys in.
struct TPM: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tpm",
        abstract: "Show or clear the dictionary-attack state of the store's TPM.",
        discussion: """
            Example:
              keymgr tpm status
            """,
        subcommands: [Status.self, ResetLockout.self])

    @OptionGroup var globals: GlobalOptions

    /// `keymgr tpm status`: the TPM's DA counter, limits and whether this store holds its lockoutAuth.
    struct Status: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "status",
            abstract: "Show the TPM's dictionary-attack counter and limits.",
            discussion: """
                With --json: {"tcti", "failures", "maxTries", "recoveryTime", "inLockout", "holdsLockoutAuth"}.
                A software store has no TPM: exit 64.
                """)

        @OptionGroup var globals: GlobalOptions

        func run() throws {
            let manager = try globals.openManager(readOnly: true)
            try TPM.show(try manager.tpmLockout(), globals)
        }
    }

    /// `keymgr tpm reset-lockout`: clears the TPM's DA counter with the lockoutAuth the store holds.
    struct ResetLockout: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "reset-lockout",
            abstract: "Clear the TPM's dictionary-attack lockout with the lockoutAuth keymgr set at init (audited).",
            discussion: """
                Needs the master key (the lockoutAuth is sealed under it): an administrator's act. \
                With --json: the TPM status after the reset.
                """)

        @OptionGroup var globals: GlobalOptions

        func run() throws {
            let status = try globals.openManager().resetTPMLockout()
            globals.console.confirm("cleared the dictionary-attack lockout of the TPM at \(status.tcti)")
            try TPM.show(status, globals)
        }
    }

    static func show(_ status: TPMStatus, _ globals: GlobalOptions) throws {
        try globals.render(TPMStatusOutput(status: status))
    }
}

/// `tpm status` and `tpm clear-lockout`: `TPMStatusJSON`, or aligned lines.
struct TPMStatusOutput: DocumentOutput {
    let status: TPMStatus

    var document: TPMStatusJSON {
        TPMStatusJSON(tcti: status.tcti, failures: status.failures, maxTries: status.maxTries,
                      recoveryTime: status.recoveryTime, inLockout: status.inLockout,
                      holdsLockoutAuth: status.holdsLockoutAuth)
    }

    func text(on console: Console) {
        console.answer("""
            tcti                \(status.tcti)
            failures            \(status.failures) of \(status.maxTries)\(status.inLockout ? " (in lockout)" : "")
            recovery time       \(status.recoveryTime) s per failure
            holds lockoutAuth   \(status.holdsLockoutAuth ? "yes" : "no")
            """)
    }
}

struct TPMStatusJSON: Encodable {
    let tcti: String
    let failures: UInt32
    let maxTries: UInt32
    let recoveryTime: UInt32
    let inLockout: Bool
    let holdsLockoutAuth: Bool
}
