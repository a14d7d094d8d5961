//! Opening the KVM device: errno turned into an error that names the fix.
use kvm_ioctls::Kvm;
use std::path::Path;

/// Why the KVM device could not be used. Each message names the fix.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The node is missing.
    #[error("cannot open {0}: it does not exist; load the kvm module (modprobe kvm_intel / kvm_amd) or run on a KVM host")]
    Missing(String),
    /// The node is not accessible to this user.
    #[error("cannot open {0}: permission denied; {1}")]
    Permission(String, String),
    /// Other open failure.
    #[error("cannot open {0}: {1}")]
    Open(String, std::io::Error),
    /// The path is not a KVM device.
    #[error("{0} is not a KVM device (KVM_GET_API_VERSION failed or is not 12); pass /dev/kvm to --kvm-device (VmConfig::kvm_device)")]
    NotKvm(String),
}

/// Open the KVM device at `path`, checking it speaks KVM API 12.
pub fn open(path: &Path) -> Result<Kvm, DeviceError> {
    let name = path.display().to_string();
    let cpath = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| DeviceError::Missing(name.clone()))?;
    let kvm = Kvm::new_with_path(cpath).map_err(|e| match e.errno() {
        libc::ENOENT | libc::ENODEV | libc::ENXIO => DeviceError::Missing(name.clone()),
        libc::EACCES | libc::EPERM => {
            DeviceError::Permission(name.clone(), super::device_access::hint(path))
        }
        errno => DeviceError::Open(name.clone(), std::io::Error::from_raw_os_error(errno)),
    })?;
    // KVM_API_VERSION has been 12 since Linux 2.6.22; anything else is not KVM.
    if kvm.get_api_version() != 12 {
        return Err(DeviceError::NotKvm(name));
    }
    Ok(kvm)
}
