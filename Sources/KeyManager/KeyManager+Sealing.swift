import Foundation

extension KeyManager {
    /// Opens a master-key-sealed value. The master key was checked when the store opened, so a value that does not
    /// open was altered or moved from another row: tampering, never a wrong PIN.
    func openSealed(_ sealed: Data, _ slot: SealedSlot) throws -> SecretBytes {
        do {
            return try hierarchy.open(sealed, in: slot)
        } catch {
            throw Self.tampered("a sealed value (\(slot.purpose))")
        }
    }
}
