import ArgumentParser
import AgentWire
import KeyManager

/// `keymgr tpm`: the TPM a TPM store keeps its keys in.
struct TPM: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tpm",
        abstract: "Show or clear the dictionary-attack state of the store's TPM; recover from a TPM cleared or replaced.",
        discussion: """
            Example:
              keymgr tpm status
              keymgr tpm recover --yes
            """,
        subcommands: [Status.self, ResetLockout.self, Recover.self])

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

        func run(in context: CommandContext) throws {
            let manager = try globals.openManager(in: context, readOnly: true)
            try TPM.show(try manager.tpmLockout(), globals, in: context)
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

        func run(in context: CommandContext) throws {
            let status = try globals.openManager(in: context).resetTPMLockout()
            globals.console(in: context).confirm("cleared the dictionary-attack lockout of the TPM at \(status.tcti)")
            try TPM.show(status, globals, in: context)
        }
    }

    /// `keymgr tpm recover`: after the store's TPM was cleared or replaced, revokes the keys that were in it and takes
    /// the TPM now at the store's TCTI into use.
    struct Recover: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "recover",
            abstract: "After the store's TPM was cleared or replaced: revoke the keys it held and use the new TPM (audited).",
            discussion: """
                Refused (64) while the TPM at the store's TCTI still holds the store's rollback counter: then it was \
                not cleared or replaced. Otherwise every active or locked TPM key is revoked with the reason "the TPM \
                it lived in was cleared or replaced" (its people then bind again), a new rollback counter is defined \
                on the new TPM and, when the new TPM's lockoutAuth is not set, keymgr's DA parameters and a new \
                lockoutAuth are set as at init. Needs the master key: an administrator's act. Audited as \
                `tpm.recovered` and one `key.revoked` per key. Software keys are untouched. With --json: \
                {"tcti", "oldCounterIndex", "newCounterIndex", "revoked": [{"kid", "userId", "reason"}], "note"}.

                Example:
                  keymgr tpm recover --yes
                """)

        @OptionGroup var globals: GlobalOptions

        @OptionGroup var confirmation: ConfirmationOptions

        @Option(name: .customLong("tpm-max-tries"), help: "The new TPM's DA maxTries, when keymgr sets them (as init).")
        var maxTries: UInt32 = InitOptions().tpmMaxTries

        @Option(name: .customLong("tpm-recovery-time"),
                help: "Seconds the new TPM takes to forget one failure, when keymgr sets them (as init).")
        var recoveryTime: UInt32 = InitOptions().tpmRecoveryTime

        func run(in context: CommandContext) throws {
            let manager = try globals.openManager(in: context)
            guard let replaced = try manager.tpmReplacement() else {
                _ = try manager.recoverTPM(maxTries: maxTries, recoveryTime: recoveryTime)  // says why not (64)
                return
            }
            try confirmation.confirm("Revoke the \(replaced.unusableKeys.count) key(s) that were in the TPM at "
                + "\(replaced.tcti) and take the TPM now there into use?", in: context)
            let recovery = try manager.recoverTPM(maxTries: maxTries, recoveryTime: recoveryTime)
            for key in recovery.revoked {
                globals.console(in: context).confirm("revoked key \(key.kid) of \(PrintableText.stripped(key.userId)): \(key.reason)")
            }
            globals.console(in: context).confirm(String(format: "took the TPM at %@ into use (rollback counter 0x%08x)", recovery.tcti,
                                           recovery.newCounterIndex))
            if let note = recovery.note { globals.console(in: context).warn(note) }
            try globals.render(TPMRecoveryOutput(recovery: recovery), in: context)
        }
    }

    static func show(_ status: TPMStatus, _ globals: GlobalOptions, in context: CommandContext) throws {
        try globals.render(TPMStatusOutput(status: status), in: context)
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

/// `tpm recover`: `{"tcti","oldCounterIndex","newCounterIndex","revoked":[…],"note"}`, or nothing more in text (the
/// confirmations said it).
struct TPMRecoveryOutput: DocumentOutput {
    let recovery: TPMRecovery

    struct Document: Encodable {
        struct Key: Encodable {
            let kid: String
            let userId: String
            let reason: String
        }
        let tcti: String
        let oldCounterIndex: String
        let newCounterIndex: String
        let revoked: [Key]
        @Nullable var note: String?
    }

    var document: Document {
        Document(tcti: recovery.tcti, oldCounterIndex: String(format: "0x%08x", recovery.oldCounterIndex),
                 newCounterIndex: String(format: "0x%08x", recovery.newCounterIndex),
                 revoked: recovery.revoked.map { Document.Key(kid: $0.kid, userId: $0.userId, reason: $0.reason) },
                 note: recovery.note)
    }

    func text(on console: Console) {}
}
