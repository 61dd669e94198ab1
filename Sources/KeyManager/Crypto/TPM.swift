import CTSS2
import Foundation

/// Why a TPM operation failed, as far as keymgr acts on it. `code` is the TPM (or TSS) response code.
package enum TPMFailure: Error, Sendable, Equatable {
    /// Nothing answered at the TCTI, or the TCTI could not be set up.
    case unreachable(tcti: String, detail: String)
    /// A wrong authValue on a DA-protected object: the TPM counted it (TPM_RC_AUTH_FAIL) — or, on a noDA object,
    /// TPM_RC_BAD_AUTH.
    case authFailed
    /// The TPM is in dictionary-attack lockout (TPM_RC_LOCKOUT): DA-protected objects refuse until it lifts.
    case lockout
    /// A key blob that does not load here: made by another TPM, or altered (TPM_RC_INTEGRITY and the like).
    case wontLoad(code: UInt32)
    /// The persistent storage key at keymgr's handle is not the one keymgr makes.
    case foreignStorageKey(handle: UInt32)
    /// Any other failure, with the TSS's decoded text.
    case other(operation: String, code: UInt32, text: String)
}

/// The dictionary-attack state of a TPM: how many failures it holds and when one is forgotten.
package struct TPMLockoutState: Sendable, Equatable {
    package let failures: UInt32
    package let maxTries: UInt32
    /// Seconds after which the TPM forgets one failure (and so leaves lockout).
    package let recoveryTime: UInt32
    package let lockoutRecovery: UInt32
    package let inLockout: Bool
    package let lockoutAuthSet: Bool
}

/// A P-256 signing key made inside a TPM: its public point and the TPM-wrapped blob (TPM2B_PUBLIC then TPM2B_PRIVATE,
/// marshalled) that only that TPM can load.
package struct TPMKeyBlob: Sendable {
    package let publicKey: P256PublicKey
    package let blob: [UInt8]
}

/// One connection to a TPM 2.0 through ESYS at one pinned TCTI (never libtss2's own choice). Not shared between
/// threads: each operation opens one, and everything it loads is flushed before it closes (swtpm without a resource
/// manager holds only three objects).
package final class TPMConnection {
    /// keymgr's persistent storage key: ECC P-256, restricted decrypt, noDA, in the owner's persistent range.
    package static let storageKeyHandle: UInt32 = 0x8100_4B4D

    private var tctiContext: OpaquePointer?
    private var context: OpaquePointer?
    package let tcti: String
    private var storageKey: ESYS_TR?
    /// The storage key's handle as found, its template not (yet) checked.
    private var uncheckedStorageKey: ESYS_TR?

    /// Silences libtss2 before its first use: it logs to stderr otherwise.
    private static let quiet: Void = { setenv("TSS2_LOG", "all+none", 1) }()

    package init(tcti: String) throws {
        _ = Self.quiet
        self.tcti = tcti
        guard !tcti.isEmpty else { throw TPMFailure.unreachable(tcti: tcti, detail: "no TCTI configured") }
        var tctiContext: OpaquePointer?
        let rc = Tss2_TctiLdr_Initialize(tcti, &tctiContext)
        guard rc == 0, let tctiContext else {
            throw TPMFailure.unreachable(tcti: tcti, detail: Self.text(rc))
        }
        self.tctiContext = tctiContext
        var context: OpaquePointer?
        let initRC = Esys_Initialize(&context, tctiContext, nil)
        guard initRC == 0, let context else {
            Tss2_TctiLdr_Finalize(&self.tctiContext)
            throw TPMFailure.unreachable(tcti: tcti, detail: Self.text(initRC))
        }
        self.context = context
    }

    deinit { close() }

    /// One connection for `body`, one at a time in this process: the TPM's few object and session slots, and a swtpm
    /// that serves one connection at a time, are never raced for by keymgr's own threads.
    ///
    /// swtpm (no resource manager, unlike /dev/tpmrm0) keeps the objects a killed process had loaded, and has room
    /// for only three: when it answers "out of memory for objects" (TPM_RC_OBJECT_MEMORY), keymgr, holding the lock
    /// below so that no other keymgr is mid-operation, flushes every transient object and tries once more.
    /// swtpm serves each command on a connection of its own, so keymgr processes sharing one also take an OS lock
    /// (`flock` on the directory of its socket) for the length of an operation.
    ///
    /// The connection (the ESYS context) is kept for the next operation of this process at the same TCTI: a sign's
    /// key load, its rollback check and its counter step then cost one TCTI set-up, not three. Nothing loaded in the
    /// TPM is kept between operations (every object and session is flushed or closed), and the storage key is resolved
    /// afresh in each. It is dropped after any failure, and never used across a fork.
    package static func with<T>(tcti: String, _ body: (TPMConnection) throws -> T) throws -> T {
        try exclusive.withLock {
            let lock = lockDirectory(tcti).flatMap { try? FileLock(path: $0, directory: true) { _ in TPMLockUnavailable() } }
            lock?.lock()
            defer { lock?.release() }
            // The whole operation under one deadline (W10): a TPM that never answers is cut off, not waited for.
            let deadline = TPMDeadline.start(tcti: tcti)
            let outcome = Result { () throws -> T in
                do {
                    return try body(try kept(tcti))
                } catch TPMFailure.other(_, let code, _) where lock != nil && [0x902, 0x903].contains(code & 0xFFFF_FF7F) {
                    // OBJECT_MEMORY or SESSION_MEMORY: what killed processes left loaded.
                    keptConnection = nil
                    try kept(tcti).flushTransientObjects()
                    return try body(try kept(tcti))
                } catch {
                    keptConnection = nil
                    throw error
                }
            }
            if deadline.finish() {
                keptConnection = nil
                throw deadline.failure
            }
            return try outcome.get()
        }
    }

    /// A socket directory that cannot be opened: the operation goes on without the OS lock, as before.
    private struct TPMLockUnavailable: Error {}

    /// The connection kept for `tcti` by this process (only ever touched under `exclusive`).
    nonisolated(unsafe) private static var keptConnection: (pid: pid_t, connection: TPMConnection)?

    private static func kept(_ tcti: String) throws -> TPMConnection {
        if let kept = keptConnection, kept.pid == getpid(), kept.connection.tcti == tcti {
            kept.connection.forgetStorageKey()
            return kept.connection
        }
        // A connection made before a fork is the parent's (a device TCTI's descriptor is shared): never used here.
        if let kept = keptConnection, kept.pid != getpid() { kept.connection.abandon() }
        keptConnection = nil
        let connection = try TPMConnection(tcti: tcti)
        keptConnection = (getpid(), connection)
        return connection
    }

    /// The directory of a `swtpm:path=SOCKET` TCTI's socket; nil for other TCTIs (a kernel resource manager,
    /// /dev/tpmrm0, keeps each process's objects apart).
    private static func lockDirectory(_ tcti: String) -> String? {
        guard tcti.hasPrefix("swtpm:") else { return nil }
        for option in tcti.dropFirst("swtpm:".count).split(separator: ",") where option.hasPrefix("path=") {
            let path = String(option.dropFirst("path=".count))
            return (path as NSString).deletingLastPathComponent
        }
        return nil
    }

    /// Flushes every loaded transient object and every loaded session (TPM2_GetCapability of the transient, HMAC
    /// session and policy session handles, then TPM2_FlushContext).
    private func flushTransientObjects() throws {
        let esys = try esys
        for first: UInt32 in [0x8000_0000, 0x0200_0000, 0x0300_0000] {
            var more: TPMI_YES_NO = 0
            var data: UnsafeMutablePointer<TPMS_CAPABILITY_DATA>?
            let rc = Esys_GetCapability(esys, Self.none, Self.none, Self.none, 1, first, 64, &more, &data)
            defer { Esys_Free(data) }
            guard rc == 0, let data else { throw Self.failure("GetCapability", rc) }
            let handles = data.pointee.data.handles
            let found: [UInt32] = withUnsafeBytes(of: handles.handle) { raw in
                Array(raw.bindMemory(to: UInt32.self).prefix(Int(handles.count)))
            }
            // By TPM handle through SAPI: nothing to resolve first.
            let sys = try sys
            for tpmHandle in found where tpmHandle & 0xFF00_0000 == first & 0xFF00_0000 {
                _ = Tss2_Sys_FlushContext(sys, tpmHandle)
            }
        }
    }

    private static let exclusive = NSLock()

    /// Resolves the storage key afresh in the next operation: its public key salts sessions, and another TPM may
    /// answer at the TCTI by then.
    private func forgetStorageKey() {
        guard let context else { return }
        for handle in [storageKey, uncheckedStorageKey].compactMap({ $0 }) {
            var closing = handle
            _ = Esys_TR_Close(context, &closing)
        }
        storageKey = nil
        uncheckedStorageKey = nil
    }

    /// Forgets the connection without a word to the TPM: it was inherited across a fork. Only this process's copy of
    /// its descriptor is closed.
    private func abandon() { close() }

    private func close() {
        storageKey = nil  // Esys_Finalize releases every ESYS_TR
        uncheckedStorageKey = nil
        if context != nil { Esys_Finalize(&context) }
        if tctiContext != nil { Tss2_TctiLdr_Finalize(&tctiContext) }
    }

    private var esys: OpaquePointer {
        get throws {
            guard let context else { throw TPMFailure.unreachable(tcti: tcti, detail: "the connection was closed") }
            return context
        }
    }

    // MARK: The storage key

    /// keymgr's persistent storage key, made (and made persistent) when absent; a key at the handle that is not
    /// keymgr's template (not noDA, not a restricted P-256 decryption key) is refused, never used.
    /// `checkTemplate` reads the key's public area and compares it with keymgr's template (for making keys: a key
    /// under a foreign parent would not be keymgr's); loading a blob needs no check, as a blob does not load under
    /// any other parent.
    /// Without `create`, a TPM with no key at the handle (another TPM, or one cleared) is `wontLoad`: nothing keymgr
    /// made can load there, and nothing is made persistent on a TPM just to find that out.
    package func storagePrimary(checkTemplate: Bool = true, create: Bool = true) throws -> ESYS_TR {
        if let storageKey { return storageKey }
        if !checkTemplate, let uncheckedStorageKey { return uncheckedStorageKey }
        let esys = try esys
        var handle: ESYS_TR = 0
        let found = Esys_TR_FromTPMPublic(esys, Self.storageKeyHandle, Self.none, Self.none, Self.none, &handle)
        if found == 0, !checkTemplate {
            uncheckedStorageKey = handle
            return handle
        }
        if found == 0 {
            var outPublic: UnsafeMutablePointer<TPM2B_PUBLIC>?
            var name: UnsafeMutablePointer<TPM2B_NAME>?
            var qualified: UnsafeMutablePointer<TPM2B_NAME>?
            let rc = Esys_ReadPublic(esys, handle, Self.none, Self.none, Self.none, &outPublic, &name, &qualified)
            defer { Esys_Free(outPublic); Esys_Free(name); Esys_Free(qualified) }
            guard rc == 0, let area = outPublic?.pointee.publicArea else { throw Self.failure("ReadPublic", rc) }
            let wanted = Self.storageTemplate().publicArea
            guard area.type == wanted.type, area.nameAlg == wanted.nameAlg,
                  area.objectAttributes == wanted.objectAttributes,
                  area.parameters.eccDetail.curveID == wanted.parameters.eccDetail.curveID,
                  area.parameters.eccDetail.symmetric.algorithm == Self.algAES,
                  area.authPolicy.size == 0 else {
                throw TPMFailure.foreignStorageKey(handle: Self.storageKeyHandle)
            }
            storageKey = handle
            return handle
        }
        guard UInt32(found) >> 16 == 0, Self.base(found) == 0x08B else {  // TPM_RC_HANDLE: nothing persistent there
            throw Self.failure("TR_FromTPMPublic", found)
        }
        guard create else { throw TPMFailure.wontLoad(code: UInt32(found)) }
        var sensitive = TPM2B_SENSITIVE_CREATE()
        var template = Self.storageTemplate()
        var outside = TPM2B_DATA()
        var pcrs = TPML_PCR_SELECTION()
        var transient: ESYS_TR = 0
        var outPublic: UnsafeMutablePointer<TPM2B_PUBLIC>?
        var creationData: UnsafeMutablePointer<TPM2B_CREATION_DATA>?
        var creationHash: UnsafeMutablePointer<TPM2B_DIGEST>?
        var ticket: UnsafeMutablePointer<TPMT_TK_CREATION>?
        let created = Esys_CreatePrimary(esys, Self.rhOwner, Self.password, Self.none, Self.none, &sensitive, &template,
                                         &outside, &pcrs, &transient, &outPublic, &creationData, &creationHash, &ticket)
        Esys_Free(outPublic); Esys_Free(creationData); Esys_Free(creationHash); Esys_Free(ticket)
        guard created == 0 else { throw Self.failure("CreatePrimary", created) }
        var persistent: ESYS_TR = 0
        let evicted = Esys_EvictControl(esys, Self.rhOwner, transient, Self.password, Self.none, Self.none,
                                        Self.storageKeyHandle, &persistent)
        _ = Esys_FlushContext(esys, transient)
        guard evicted == 0 else { throw Self.failure("EvictControl", evicted) }
        storageKey = persistent
        return persistent
    }

    // MARK: Signing keys

    /// Makes a P-256 ECDSA-SHA256 signing key inside the TPM under the storage key, with `auth` as its authValue.
    /// `dictionaryProtected` keys count wrong authValues toward the TPM's lockout; the others are noDA.
    package func createSigningKey(auth: SecretBytes, dictionaryProtected: Bool) throws -> TPMKeyBlob {
        let parent = try storagePrimary()
        var sensitive = TPM2B_SENSITIVE_CREATE()
        try Self.fill(&sensitive.sensitive.userAuth, auth.bytes)
        var template = Self.signingTemplate(dictionaryProtected: dictionaryProtected)
        var outside = TPM2B_DATA()
        var pcrs = TPML_PCR_SELECTION()
        var outPrivate: UnsafeMutablePointer<TPM2B_PRIVATE>?
        var outPublic: UnsafeMutablePointer<TPM2B_PUBLIC>?
        var creationData: UnsafeMutablePointer<TPM2B_CREATION_DATA>?
        var creationHash: UnsafeMutablePointer<TPM2B_DIGEST>?
        var ticket: UnsafeMutablePointer<TPMT_TK_CREATION>?
        let rc = Esys_Create(try esys, parent, Self.password, Self.none, Self.none, &sensitive, &template, &outside,
                             &pcrs, &outPrivate, &outPublic, &creationData, &creationHash, &ticket)
        defer { Esys_Free(outPrivate); Esys_Free(outPublic); Esys_Free(creationData); Esys_Free(creationHash); Esys_Free(ticket) }
        // The sensitive area held the authValue: wipe the stack copy.
        wipe(&sensitive)
        guard rc == 0, let outPrivate, let outPublic else { throw Self.failure("Create", rc) }
        return TPMKeyBlob(publicKey: try Self.publicKey(of: outPublic.pointee),
                          blob: try Self.marshal(public: outPublic.pointee, private: outPrivate.pointee))
    }

    /// The public key a blob carries, read without a TPM.
    package static func publicKey(ofBlob blob: [UInt8]) throws -> P256PublicKey {
        try publicKey(of: try unmarshal(blob).public)
    }

    /// Loads a key blob under the storage key. The caller flushes the handle (`flush`).
    package func load(_ blob: [UInt8]) throws -> ESYS_TR {
        let parent = try storagePrimary(checkTemplate: false)
        var (publicPart, privatePart) = try Self.unmarshal(blob)
        var handle: ESYS_TR = 0
        let rc = Esys_Load(try esys, parent, Self.password, Self.none, Self.none, &privatePart, &publicPart, &handle)
        guard rc == 0 else {
            switch Self.base(rc) {
            case 0x09F, 0x09D, 0x0A5, 0x08F, 0x09A, 0x095:  // integrity, key size, key, ... : not this TPM's blob
                throw TPMFailure.wontLoad(code: rc)
            default:
                throw Self.failure("Load", rc)
            }
        }
        return handle
    }

    package func flush(_ handle: ESYS_TR) {
        if let context { _ = Esys_FlushContext(context, handle) }
    }

    // MARK: The signing path, through SAPI
    //
    // A signature and the rollback counter go through the SAPI context under ESYS, by TPM handle and with password
    // authorisation: ESYS would resolve each handle first (one more command) and recompute an object's or NV index's
    // name after Load and NV_Increment, and libtss2 3.2 with OpenSSL 3 builds a whole new OpenSSL library context for
    // every such hash (about a third of a TPM sign's instructions in keymgr). Nothing on this path needs a name.

    private var sys: OpaquePointer {
        get throws {
            var sys: OpaquePointer?
            let rc = Esys_GetSysContext(try esys, &sys)
            guard rc == 0, let sys else { throw Self.failure("GetSysContext", rc) }
            return sys
        }
    }

    /// Sends a SAPI command again while the TPM answers TPM_RC_RETRY, TPM_RC_YIELDED or TPM_RC_TESTING ("try again":
    /// ESYS resubmits these by itself, SAPI does not), at most five times as ESYS does.
    private static func resubmitting(_ command: () -> TSS2_RC) -> TSS2_RC {
        var rc = command()
        for _ in 1..<5 where [0x922, 0x908, 0x90A].contains(UInt32(rc)) { rc = command() }
        return rc
    }

    /// One password authorisation (TPM2_RS_PW) carrying `auth` (empty when nil).
    private static func passwordAuthorization(_ auth: SecretBytes?) throws -> TSS2L_SYS_AUTH_COMMAND {
        var command = TSS2L_SYS_AUTH_COMMAND()
        command.count = 1
        command.auths.0.sessionHandle = 0x4000_0009
        if let auth { try fill(&command.auths.0.hmac, auth.bytes) }
        return command
    }

    /// Loads a signing key's blob under keymgr's persistent storage key (by its handle: nothing to resolve first).
    /// The caller flushes it (`flushForSigning`). A TPM without that storage key, or one that did not make the blob:
    /// `wontLoad`.
    package func loadForSigning(_ blob: [UInt8]) throws -> UInt32 {
        var (publicPart, privatePart) = try Self.unmarshal(blob)
        var authorization = try Self.passwordAuthorization(nil)
        var handle: TPM2_HANDLE = 0
        var name = TPM2B_NAME()
        var response = TSS2L_SYS_AUTH_RESPONSE()
        let sys = try sys
        let rc = Self.resubmitting {
            Tss2_Sys_Load(sys, Self.storageKeyHandle, &authorization, &privatePart, &publicPart, &handle, &name, &response)
        }
        guard rc == 0 else {
            switch (UInt32(rc) >> 16, Self.base(rc)) {
            case (0, 0x09F), (0, 0x09D), (0, 0x0A5), (0, 0x08F), (0, 0x09A), (0, 0x095), (0, 0x08B):
                throw TPMFailure.wontLoad(code: rc)  // integrity, key, ..., or no storage key at the handle
            default:
                throw Self.failure("Load", rc)
            }
        }
        return handle
    }

    package func flushForSigning(_ handle: UInt32) {
        guard let sys = try? sys else { return }
        _ = Tss2_Sys_FlushContext(sys, handle)
    }

    /// ES256 over `message` with a key `loadForSigning` loaded: SHA-256 here, ECDSA inside the TPM; raw r||s.
    package func signForSigning(_ handle: UInt32, auth: SecretBytes, message: [UInt8]) throws -> [UInt8] {
        var authorization = try Self.passwordAuthorization(auth)
        defer { wipe(&authorization) }
        var digest = TPM2B_DIGEST()
        try Self.fill(&digest, SHA256.hash(message))
        var scheme = TPMT_SIG_SCHEME()
        scheme.scheme = Self.algECDSA
        scheme.details.ecdsa.hashAlg = Self.algSHA256
        var validation = TPMT_TK_HASHCHECK()
        validation.tag = 0x8024  // TPM2_ST_HASHCHECK
        validation.hierarchy = 0x4000_0007  // TPM2_RH_NULL
        var signature = TPMT_SIGNATURE()
        var response = TSS2L_SYS_AUTH_RESPONSE()
        let sys = try sys
        let rc = Self.resubmitting {
            Tss2_Sys_Sign(sys, handle, &authorization, &digest, &scheme, &validation, &signature, &response)
        }
        guard rc == 0 else { throw Self.failure("Sign", rc) }
        return try Self.fixed32(signature.signature.ecdsa.signatureR) + Self.fixed32(signature.signature.ecdsa.signatureS)
    }

    /// A new blob of the same key with `newAuth` as its authValue (TPM2_ObjectChangeAuth); `oldAuth` authorises it.
    package func changeAuth(_ blob: [UInt8], oldAuth: SecretBytes, newAuth: SecretBytes) throws -> [UInt8] {
        let esys = try esys
        let parent = try storagePrimary(checkTemplate: false)
        let handle = try load(blob)
        defer { flush(handle) }
        var old = TPM2B_AUTH()
        try Self.fill(&old, oldAuth.bytes)
        _ = Esys_TR_SetAuth(esys, handle, &old)
        var new = TPM2B_AUTH()
        try Self.fill(&new, newAuth.bytes)
        var outPrivate: UnsafeMutablePointer<TPM2B_PRIVATE>?
        let rc = Esys_ObjectChangeAuth(esys, handle, parent, Self.password, Self.none, Self.none, &new, &outPrivate)
        wipe(&old)
        wipe(&new)
        defer { Esys_Free(outPrivate) }
        guard rc == 0, let outPrivate else { throw Self.failure("ObjectChangeAuth", rc) }
        return try Self.marshal(public: try Self.unmarshal(blob).public, private: outPrivate.pointee)
    }

    // MARK: Sealed data (the master key)

    /// Seals `secret` (at most 128 bytes) to this TPM: a keyedhash sealed-data object under the storage key, noDA,
    /// empty authValue, no policy (fixedTPM and fixedParent: the blob loads under keymgr's storage key in this TPM
    /// alone). The secret travels to the TPM encrypted in a session salted to the storage key, so neither the bus nor
    /// something posing as the TPM at the TCTI sees it. Returns the blob (the same format as a key blob).
    package func seal(_ secret: SecretBytes) throws -> [UInt8] {
        let parent = try storagePrimary()
        let esys = try esys
        var sensitive = TPM2B_SENSITIVE_CREATE()
        let bytes = secret.bytes
        guard bytes.count <= 128 else { throw TPMFailure.other(operation: "seal", code: 0, text: "secret too long") }
        sensitive.sensitive.data.size = UInt16(bytes.count)
        withUnsafeMutableBytes(of: &sensitive.sensitive.data.buffer) { $0.copyBytes(from: bytes) }
        defer { wipe(&sensitive) }
        var template = Self.sealedDataTemplate()
        var outside = TPM2B_DATA()
        var pcrs = TPML_PCR_SELECTION()
        let session = try saltedSession(parent, attributes: Self.sessionDecrypt)
        var outPrivate: UnsafeMutablePointer<TPM2B_PRIVATE>?
        var outPublic: UnsafeMutablePointer<TPM2B_PUBLIC>?
        var creationData: UnsafeMutablePointer<TPM2B_CREATION_DATA>?
        var creationHash: UnsafeMutablePointer<TPM2B_DIGEST>?
        var ticket: UnsafeMutablePointer<TPMT_TK_CREATION>?
        let rc = Esys_Create(esys, parent, session, Self.none, Self.none, &sensitive, &template, &outside, &pcrs,
                             &outPrivate, &outPublic, &creationData, &creationHash, &ticket)
        defer { Esys_Free(outPrivate); Esys_Free(outPublic); Esys_Free(creationData); Esys_Free(creationHash); Esys_Free(ticket) }
        guard rc == 0, let outPrivate, let outPublic else {
            flush(session)  // a session the TPM did not close (the command failed)
            throw Self.failure("Create", rc)
        }
        return try Self.marshal(public: outPublic.pointee, private: outPrivate.pointee)
    }

    /// The secret `seal` sealed in `blob`; `wontLoad` when the blob is not this TPM's (or was altered). The answer
    /// comes back encrypted in a session salted to the storage key.
    package func unseal(_ blob: [UInt8]) throws -> SecretBytes {
        let (publicPart, _) = try Self.unmarshal(blob)
        guard publicPart.publicArea.type == Self.algKeyedHash,
              publicPart.publicArea.objectAttributes & (Attribute.sign | Attribute.decrypt) == 0 else {
            throw TPMFailure.wontLoad(code: 0)
        }
        let esys = try esys
        let parent = try storagePrimary(checkTemplate: false, create: false)
        let handle = try load(blob)
        defer { flush(handle) }
        let session = try saltedSession(parent, attributes: Self.sessionEncrypt)
        var data: UnsafeMutablePointer<TPM2B_SENSITIVE_DATA>?
        let rc = Esys_Unseal(esys, handle, session, Self.none, Self.none, &data)
        defer {
            if let data { wipe(&data.pointee) }
            Esys_Free(data)
        }
        guard rc == 0, let data else {
            flush(session)
            throw Self.failure("Unseal", rc)
        }
        let count = min(Int(data.pointee.size), MemoryLayout.size(ofValue: data.pointee.buffer))
        return SecretBytes(withUnsafeBytes(of: data.pointee.buffer) { Array($0.prefix(count)) })
    }

    /// An HMAC session salted to `key` (so only the TPM holding that key's private part can use it), for one command:
    /// continueSession is clear, so the TPM closes it when that command succeeds.
    func saltedSession(_ key: ESYS_TR, attributes: UInt8) throws -> ESYS_TR {
        let esys = try esys
        var symmetric = TPMT_SYM_DEF()
        symmetric.algorithm = Self.algAES
        symmetric.keyBits.aes = 128
        symmetric.mode.aes = Self.algCFB
        var session: ESYS_TR = 0
        let rc = Esys_StartAuthSession(esys, key, Self.none, Self.none, Self.none, Self.none, nil, 0x00 /* TPM2_SE_HMAC */,
                                       &symmetric, Self.algSHA256, &session)
        guard rc == 0 else { throw Self.failure("StartAuthSession", rc) }
        let set = Esys_TRSess_SetAttributes(esys, session, attributes, 0xFF)
        guard set == 0 else {
            flush(session)
            throw Self.failure("TRSess_SetAttributes", set)
        }
        return session
    }

    static let sessionDecrypt: UInt8 = 0x20  // TPMA_SESSION_DECRYPT: the command's first parameter encrypted
    private static let sessionEncrypt: UInt8 = 0x40  // TPMA_SESSION_ENCRYPT: the response's first parameter encrypted

    // MARK: Dictionary-attack protection

    /// The TPM's DA counter, limits and whether lockoutAuth is set.
    package func lockoutState() throws -> TPMLockoutState {
        let esys = try esys
        var more: TPMI_YES_NO = 0
        var data: UnsafeMutablePointer<TPMS_CAPABILITY_DATA>?
        let rc = Esys_GetCapability(esys, Self.none, Self.none, Self.none, 6, 0x200, 32, &more, &data)
        defer { Esys_Free(data) }
        guard rc == 0, let data else { throw Self.failure("GetCapability", rc) }
        var values: [UInt32: UInt32] = [:]
        let properties = data.pointee.data.tpmProperties
        withUnsafeBytes(of: properties.tpmProperty) { raw in
            let list = raw.bindMemory(to: TPMS_TAGGED_PROPERTY.self)
            for index in 0..<min(Int(properties.count), list.count) { values[list[index].property] = list[index].value }
        }
        let permanent = values[0x200] ?? 0
        return TPMLockoutState(failures: values[0x20E] ?? 0, maxTries: values[0x20F] ?? 0,
                               recoveryTime: values[0x210] ?? 0, lockoutRecovery: values[0x211] ?? 0,
                               inLockout: permanent & 0x200 != 0, lockoutAuthSet: permanent & 0x4 != 0)
    }

    /// Sets the DA parameters (TPM2_DictionaryAttackParameters), authorised by the current lockoutAuth.
    package func setDictionaryAttack(maxTries: UInt32, recoveryTime: UInt32, lockoutRecovery: UInt32,
                                     lockoutAuth: SecretBytes?) throws {
        let esys = try esys
        try authorizeLockout(lockoutAuth)
        let rc = Esys_DictionaryAttackParameters(esys, Self.rhLockout, Self.password, Self.none, Self.none,
                                                 maxTries, recoveryTime, lockoutRecovery)
        guard rc == 0 else { throw Self.failure("DictionaryAttackParameters", rc) }
    }

    /// Clears the DA counter and lockout (TPM2_DictionaryAttackLockReset), authorised by lockoutAuth.
    package func resetLockout(lockoutAuth: SecretBytes?) throws {
        let esys = try esys
        try authorizeLockout(lockoutAuth)
        let rc = Esys_DictionaryAttackLockReset(esys, Self.rhLockout, Self.password, Self.none, Self.none)
        guard rc == 0 else { throw Self.failure("DictionaryAttackLockReset", rc) }
    }

    /// Replaces lockoutAuth (TPM2_HierarchyChangeAuth on the lockout hierarchy).
    package func changeLockoutAuth(from old: SecretBytes?, to new: SecretBytes) throws {
        let esys = try esys
        try authorizeLockout(old)
        var auth = TPM2B_AUTH()
        try Self.fill(&auth, new.bytes)
        let rc = Esys_HierarchyChangeAuth(esys, Self.rhLockout, Self.password, Self.none, Self.none, &auth)
        wipe(&auth)
        guard rc == 0 else { throw Self.failure("HierarchyChangeAuth", rc) }
    }

    private func authorizeLockout(_ lockoutAuth: SecretBytes?) throws {
        var auth = TPM2B_AUTH()
        if let lockoutAuth { try Self.fill(&auth, lockoutAuth.bytes) }
        let rc = Esys_TR_SetAuth(try esys, Self.rhLockout, &auth)
        wipe(&auth)
        guard rc == 0 else { throw Self.failure("TR_SetAuth", rc) }
    }

    // MARK: The rollback counter

    /// Defines an NV counter (nt=counter: it only ever goes up, and deleting and re-defining it does not restart it
    /// lower) authorised by `auth` (noDA), at a free index of keymgr's range, and increments it once (a counter
    /// cannot be read before). Returns the index and its value.
    package func defineCounter(auth: SecretBytes) throws -> (index: UInt32, value: UInt64) {
        let esys = try esys
        var authValue = TPM2B_AUTH()
        try Self.fill(&authValue, auth.bytes)
        defer { wipe(&authValue) }
        for _ in 0..<16 {
            let index = Self.counterRange | UInt32.random(in: 0...0xFFFF)
            var info = TPM2B_NV_PUBLIC()
            info.nvPublic.nvIndex = index
            info.nvPublic.nameAlg = Self.algSHA256
            info.nvPublic.attributes = 0x1 << 4 | 0x4 | 0x4_0000 | 0x200_0000  // counter, AUTHWRITE, AUTHREAD, NO_DA
            info.nvPublic.dataSize = 8
            var handle: ESYS_TR = 0
            let rc = Esys_NV_DefineSpace(esys, Self.rhOwner, Self.password, Self.none, Self.none, &authValue, &info, &handle)
            if UInt32(rc) >> 16 == 0, Self.base(rc) == 0x14C { continue }  // TPM_RC_NV_DEFINED: taken, try another
            guard rc == 0 else { throw Self.failure("NV_DefineSpace", rc) }
            return (index, try incrementCounter(index, auth: auth))
        }
        throw TPMFailure.other(operation: "NV_DefineSpace", code: 0, text: "no free NV index in keymgr's range")
    }

    /// Increments the counter at `index` and returns its new value: `current + 1` when the caller has just read
    /// `current` in the same exclusive stretch (nothing else steps the counter there), else read back.
    package func incrementCounter(_ index: UInt32, auth: SecretBytes, from current: UInt64? = nil) throws -> UInt64 {
        var authorization = try Self.passwordAuthorization(auth)
        defer { wipe(&authorization) }
        var response = TSS2L_SYS_AUTH_RESPONSE()
        let sys = try sys
        let rc = Self.resubmitting { Tss2_Sys_NV_Increment(sys, index, index, &authorization, &response) }
        guard rc == 0 else { throw Self.failure("NV_Increment", rc) }
        if let current { return current + 1 }
        return try readCounter(index, auth: auth)
    }

    /// The counter's value.
    package func readCounter(_ index: UInt32, auth: SecretBytes) throws -> UInt64 {
        var authorization = try Self.passwordAuthorization(auth)
        defer { wipe(&authorization) }
        var data = TPM2B_MAX_NV_BUFFER()
        var response = TSS2L_SYS_AUTH_RESPONSE()
        let sys = try sys
        let rc = Self.resubmitting { Tss2_Sys_NV_Read(sys, index, index, &authorization, 8, 0, &data, &response) }
        guard rc == 0, data.size == 8 else {
            if rc != 0, UInt32(rc) >> 16 == 0, Self.base(rc) == 0x08B {  // TPM_RC_HANDLE: no such index on this TPM
                throw TPMFailure.other(operation: String(format: "find NV index 0x%08x", index), code: UInt32(rc),
                                       text: Self.text(rc))
            }
            throw Self.failure("NV_Read", rc)
        }
        return withUnsafeBytes(of: data.buffer) { $0.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) } }
    }

    /// Whether an NV index is defined on this TPM, asked with NV_ReadPublic (no authorisation, nothing
    /// dictionary-attack protected): a store's rollback counter that is gone means the TPM was cleared or replaced.
    package func nvIndexDefined(_ index: UInt32) throws -> Bool {
        var info = TPM2B_NV_PUBLIC()
        var name = TPM2B_NAME()
        let sys = try sys
        let rc = Self.resubmitting { Tss2_Sys_NV_ReadPublic(sys, index, nil, &info, &name, nil) }
        if rc == 0 { return true }
        if UInt32(rc) >> 16 == 0, Self.base(rc) == 0x08B { return false }  // TPM_RC_HANDLE: no such index
        throw Self.failure("NV_ReadPublic", rc)
    }

    /// keymgr's NV indices: 0x013C0000 to 0x013CFFFF, in the owner's range.
    static let counterRange: UInt32 = 0x013C_0000

    // MARK: Templates, marshalling, codes

    static let none = ESYS_TR(0xFFF)
    static let password = ESYS_TR(0x0FF)
    static let rhOwner = ESYS_TR(0x101)
    static let rhLockout = ESYS_TR(0x10A)
    static let algECC: UInt16 = 0x0023
    static let algKeyedHash: UInt16 = 0x0008
    static let algSHA256: UInt16 = 0x000B
    static let algNULL: UInt16 = 0x0010
    static let algECDSA: UInt16 = 0x0018
    static let algAES: UInt16 = 0x0006
    static let algCFB: UInt16 = 0x0043
    static let curveP256: UInt16 = 0x0003

    private enum Attribute {
        static let fixedTPM: UInt32 = 0x2, fixedParent: UInt32 = 0x10, sensitiveDataOrigin: UInt32 = 0x20
        static let userWithAuth: UInt32 = 0x40, noDA: UInt32 = 0x400, restricted: UInt32 = 0x1_0000
        static let decrypt: UInt32 = 0x2_0000, sign: UInt32 = 0x4_0000
    }

    static func storageTemplate() -> TPM2B_PUBLIC {
        var template = TPM2B_PUBLIC()
        template.publicArea.type = algECC
        template.publicArea.nameAlg = algSHA256
        template.publicArea.objectAttributes = Attribute.fixedTPM | Attribute.fixedParent | Attribute.sensitiveDataOrigin
            | Attribute.userWithAuth | Attribute.noDA | Attribute.restricted | Attribute.decrypt
        template.publicArea.parameters.eccDetail.symmetric.algorithm = algAES
        template.publicArea.parameters.eccDetail.symmetric.keyBits.aes = 128
        template.publicArea.parameters.eccDetail.symmetric.mode.aes = algCFB
        template.publicArea.parameters.eccDetail.scheme.scheme = algNULL
        template.publicArea.parameters.eccDetail.curveID = curveP256
        template.publicArea.parameters.eccDetail.kdf.scheme = algNULL
        return template
    }

    /// A sealed-data object: keyedhash with no scheme, neither sign nor decrypt, its data given (not TPM-made), noDA
    /// (nothing to guess: its authValue is empty, and a DA lockout from wrong PINs must never keep the store shut).
    static func sealedDataTemplate() -> TPM2B_PUBLIC {
        var template = TPM2B_PUBLIC()
        template.publicArea.type = algKeyedHash
        template.publicArea.nameAlg = algSHA256
        template.publicArea.objectAttributes = Attribute.fixedTPM | Attribute.fixedParent | Attribute.userWithAuth
            | Attribute.noDA
        template.publicArea.parameters.keyedHashDetail.scheme.scheme = algNULL
        return template
    }

    static func signingTemplate(dictionaryProtected: Bool) -> TPM2B_PUBLIC {
        var template = TPM2B_PUBLIC()
        template.publicArea.type = algECC
        template.publicArea.nameAlg = algSHA256
        template.publicArea.objectAttributes = Attribute.fixedTPM | Attribute.fixedParent | Attribute.sensitiveDataOrigin
            | Attribute.userWithAuth | Attribute.sign | (dictionaryProtected ? 0 : Attribute.noDA)
        template.publicArea.parameters.eccDetail.symmetric.algorithm = algNULL
        template.publicArea.parameters.eccDetail.scheme.scheme = algECDSA
        template.publicArea.parameters.eccDetail.scheme.details.ecdsa.hashAlg = algSHA256
        template.publicArea.parameters.eccDetail.curveID = curveP256
        template.publicArea.parameters.eccDetail.kdf.scheme = algNULL
        return template
    }

    private static func publicKey(of outPublic: TPM2B_PUBLIC) throws -> P256PublicKey {
        let area = outPublic.publicArea
        guard area.type == algECC, area.parameters.eccDetail.curveID == curveP256,
              area.objectAttributes & Attribute.sign != 0 else {
            throw TPMFailure.wontLoad(code: 0)
        }
        return try P256PublicKey(x: try fixed32(area.unique.ecc.x), y: try fixed32(area.unique.ecc.y))
    }

    /// A TPM2B_ECC_PARAMETER as 32 big-endian bytes (the TPM may drop leading zeros).
    private static func fixed32(_ parameter: TPM2B_ECC_PARAMETER) throws -> [UInt8] {
        let count = Int(parameter.size)
        guard count <= 32 else { throw TPMFailure.other(operation: "ECC parameter", code: 0, text: "longer than 32 bytes") }
        let bytes = withUnsafeBytes(of: parameter.buffer) { Array($0.prefix(count)) }
        return [UInt8](repeating: 0, count: 32 - count) + bytes
    }

    /// Copies `bytes` into a TPM2B's buffer and sets its size.
    private static func fill(_ value: inout TPM2B_DIGEST, _ bytes: [UInt8]) throws {
        guard bytes.count <= MemoryLayout.size(ofValue: value.buffer) else {
            throw TPMFailure.other(operation: "TPM2B", code: 0, text: "value too long")
        }
        value.size = UInt16(bytes.count)
        withUnsafeMutableBytes(of: &value.buffer) { $0.copyBytes(from: bytes) }
    }

    private static let blobVersion: UInt8 = 1

    private static func marshal(public publicPart: TPM2B_PUBLIC, private privatePart: TPM2B_PRIVATE) throws -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: 1 + MemoryLayout<TPM2B_PUBLIC>.size + MemoryLayout<TPM2B_PRIVATE>.size)
        buffer[0] = blobVersion
        var offset = 1
        var publicPart = publicPart, privatePart = privatePart
        let count = buffer.count
        let rc = buffer.withUnsafeMutableBufferPointer { out -> TSS2_RC in
            let first = Tss2_MU_TPM2B_PUBLIC_Marshal(&publicPart, out.baseAddress, count, &offset)
            return first != 0 ? first : Tss2_MU_TPM2B_PRIVATE_Marshal(&privatePart, out.baseAddress, count, &offset)
        }
        guard rc == 0 else { throw failure("marshal", rc) }
        return Array(buffer.prefix(offset))
    }

    private static func unmarshal(_ blob: [UInt8]) throws -> (public: TPM2B_PUBLIC, private: TPM2B_PRIVATE) {
        guard blob.first == blobVersion else { throw TPMFailure.wontLoad(code: 0) }
        var publicPart = TPM2B_PUBLIC()
        var privatePart = TPM2B_PRIVATE()
        var offset = 1
        let rc = blob.withUnsafeBufferPointer { input -> TSS2_RC in
            let first = Tss2_MU_TPM2B_PUBLIC_Unmarshal(input.baseAddress, input.count, &offset, &publicPart)
            return first != 0 ? first : Tss2_MU_TPM2B_PRIVATE_Unmarshal(input.baseAddress, input.count, &offset, &privatePart)
        }
        guard rc == 0, offset == blob.count else { throw TPMFailure.wontLoad(code: rc) }
        return (publicPart, privatePart)
    }

    /// A TPM format-one code without its handle/session/parameter number (0x98e → 0x08e); others as they are.
    static func base(_ rc: TSS2_RC) -> UInt32 {
        let code = UInt32(rc) & 0xFFFF
        return code & 0x80 != 0 ? code & 0xBF : code
    }

    static func failure(_ operation: String, _ rc: TSS2_RC) -> TPMFailure {
        let layer = UInt32(rc) >> 16
        let code = UInt32(rc) & 0xFFFF
        // The TCTI's own failures, or ESYS's "no connection" / "IO error": nothing (any more) answers.
        if layer == 10 || (layer == 7 && (code == 8 || code == 10)) {
            return .unreachable(tcti: "", detail: text(rc))
        }
        if layer == 0 {
            if base(rc) == 0x08E || base(rc) == 0x0A2 { return .authFailed }  // AUTH_FAIL (counted), BAD_AUTH (noDA)
            if code == 0x921 { return .lockout }
        }
        return .other(operation: operation, code: UInt32(rc), text: text(rc))
    }

    static func text(_ rc: TSS2_RC) -> String {
        guard let decoded = Tss2_RC_Decode(rc) else { return String(format: "0x%x", rc) }
        return String(cString: decoded)
    }
}

/// A key a TPM holds: each signature loads its blob, signs and flushes it, on a connection of its own, so that no
/// TPM object or connection outlives one operation (swtpm serves one connection at a time).
package struct TPMSigningKey: ES256Signer {
    private let tcti: String
    private let blob: [UInt8]
    private let auth: SecretBytes
    package let publicKey: P256PublicKey

    package init(tcti: String, blob: [UInt8], auth: SecretBytes) throws {
        self.publicKey = try TPMConnection.publicKey(ofBlob: blob)
        self.tcti = tcti
        self.blob = blob
        self.auth = auth
    }

    package func signature(for message: [UInt8]) throws -> [UInt8] {
        try TPMConnection.with(tcti: tcti) { connection in
            let handle = try connection.loadForSigning(blob)
            defer { connection.flushForSigning(handle) }
            return try connection.signForSigning(handle, auth: auth, message: message)
        }
    }
}

/// Zeroes a C struct that held an authValue.
private func wipe<T>(_ value: inout T) {
    withUnsafeMutableBytes(of: &value) { for index in $0.indices { $0[index] = 0 } }
}

/// What signs an ES256 JWS: a software P-256 key or a key inside a TPM.
package protocol ES256Signer {
    var publicKey: P256PublicKey { get }
    /// The raw r||s signature (64 bytes) over SHA-256 of `message`.
    func signature(for message: [UInt8]) throws -> [UInt8]
}

extension P256PrivateKey: ES256Signer {}
