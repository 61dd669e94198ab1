import Foundation
import Storage

extension KeyManager {
    /// Replaces the master key: every sealed value (private keys, PIN verifiers, client secrets, registration
    /// tokens, OAuth tokens, DPoP keys, the master-key check) is re-sealed under the new key in ONE transaction.
    ///
    /// The new key is written beside the old as `<file>.next` first and renamed into place after the commit;
    /// `open` finishes a rotation that stopped between the two. A key from systemd's credential store cannot be
    /// rewritten from here.
    public func rotateMasterKey() throws -> MasterKeyRotation {
        let keyPath: String
        switch masterKeySource {
        case .systemdCredential(let path):
            throw KeyManagerError(.config, "the master key comes from systemd's credential \(path), which keymgr cannot rewrite: "
                + "rotate it with systemd-creds and a KEYMGR_MASTER_KEY_FILE step, or run rotate outside the service")
        case .environmentFile(let path), .home(let path):
            keyPath = path
        }
        let pendingPath = keyPath + ".next"
        unlink(pendingPath)
        let newMaster = try SecretBytes.random(count: MasterKey.byteCount)
        try MasterKey.writeNew(newMaster, to: pendingPath)
        let next = KeyHierarchy(master: newMaster)

        let count: Int
        do {
            count = try write { writer -> Int in
                var rewrapped = 0
                func reseal(_ value: Data?, _ slot: SealedSlot) throws -> Data? {
                    guard let value else { return nil }
                    rewrapped += 1
                    return try next.seal(try openSealed(value, slot), in: slot)
                }
                var device = try Self.requireDevice(writer)
                device.masterKeyCheck = try reseal(device.masterKeyCheck, .masterCheck(deviceId: device.deviceId)) ?? Data()
                try writer.save(device)
                for var key in try writer.keys(statuses: Set(UserKeyRecord.Status.allCases)) where key.wrappedPrivateKey != nil {
                    key.wrappedPrivateKey = try reseal(key.wrappedPrivateKey, .privateKey(kid: key.kid, userId: key.userId))
                    try writer.update(key)
                }
                for var pin in try writer.appPINs() {
                    pin.verifier = try reseal(pin.verifier, .pinVerifier(kid: pin.kid)) ?? Data()
                    try writer.save(pin)
                }
                for var registration in try writer.registrations() {
                    let (user, server) = (registration.userId, registration.serverName)
                    registration.sealedClientSecret = try reseal(registration.sealedClientSecret,
                        .registrationSecret("client_secret", userId: user, serverName: server))
                    registration.sealedRegistrationAccessToken = try reseal(registration.sealedRegistrationAccessToken,
                        .registrationSecret("registration_access_token", userId: user, serverName: server))
                    try writer.save(registration)
                }
                for var tokens in try writer.tokenSets() {
                    let (user, server) = (tokens.userId, tokens.serverName)
                    tokens.sealedAccessToken = try reseal(tokens.sealedAccessToken, .tokenSecret("access_token", userId: user, serverName: server))
                    tokens.sealedRefreshToken = try reseal(tokens.sealedRefreshToken, .tokenSecret("refresh_token", userId: user, serverName: server))
                    tokens.sealedIdToken = try reseal(tokens.sealedIdToken, .tokenSecret("id_token", userId: user, serverName: server))
                    tokens.sealedDpopKey = try reseal(tokens.sealedDpopKey, .tokenSecret("dpop_key", userId: user, serverName: server))
                    try writer.save(tokens)
                }
                try writer.appendAudit(auditEvent("master.rotated", details: ["secretsRewrapped": .int(Int64(rewrapped))]))
                return rewrapped
            }
        } catch {
            unlink(pendingPath)
            throw error
        }
        guard rename(pendingPath, keyPath) == 0 else {
            throw KeyManagerError(.config, "the store was re-sealed under the new master key, but it could not be moved into place: "
                + "rename \(pendingPath) to \(keyPath) by hand (\(String(cString: strerror(errno))))")
        }
        let directory = Glibc.open((keyPath as NSString).deletingLastPathComponent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directory >= 0 {
            fsync(directory)
            close(directory)
        }
        return MasterKeyRotation(secretsRewrapped: count)
    }
}
