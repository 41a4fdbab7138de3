//! The project made read-only for a sandboxed process, metadata included.
//! Landlock controls what a process writes into files, not their metadata:
//! `chmod 666 aurad.yaml`, `chown`, `touch -d`, extended attributes and
//! `chmod 000 agents` stay allowed under it. So, where the kernel lets an
//! unprivileged process have a user namespace, the child (between fork and
//! exec, before it enters its Landlock domain) takes a user and mount
//! namespace of its own (the user ids mapped to themselves), binds the
//! project onto itself and makes that mount read-only with
//! `mount_setattr(2)` (Linux 5.12), which changes that one attribute and
//! none of the mount's locked ones. A `workdir` run's scratch directory,
//! inside the project, is bound first and stays writable. Every change of
//! the project's files, metadata included, then fails with "Read-only file
//! system"; the mounts exist in the child's namespace only, and Landlock
//! (entered next) forbids undoing them. Where the namespace cannot be had
//! (user namespaces disabled, an old kernel) the step is skipped: Landlock
//! still stops every write of content. Depends on std and libc.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// What the child needs, prepared in the parent: the hook between fork and
/// exec may not allocate.
#[derive(Debug)]
pub(super) struct ReadOnlyProject {
    root: CString,
    scratch: Option<CString>,
    /// The child's working directory, entered again once the mounts are
    /// made (the one it holds is the project before the read-only mount).
    cwd: Option<CString>,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

impl ReadOnlyProject {
    /// For the project at `root` (canonical) with the writable `scratch`,
    /// a child starting in `cwd`; `None` when a path holds a NUL.
    pub(super) fn new(root: &Path, scratch: Option<&Path>, cwd: Option<&Path>) -> Option<Self> {
        let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).ok();
        // SAFETY: getuid and getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Some(ReadOnlyProject {
            root: c(root)?,
            scratch: match scratch {
                Some(s) => Some(c(s)?),
                None => None,
            },
            cwd: match cwd {
                Some(d) => Some(c(d)?),
                None => None,
            },
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        })
    }

    /// In the child: the namespace and the mounts, or nothing when the
    /// kernel refuses the namespace. A namespace whose ids cannot be mapped
    /// stops the child (it would run as nobody); a mount that fails leaves
    /// the child with Landlock alone, as without a namespace.
    pub(super) fn enter(&self) -> io::Result<()> {
        // SAFETY: raw system calls on pointers to data we own, which live
        // for the whole hook; nothing is allocated.
        unsafe {
            if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0 {
                return Ok(());
            }
            write_file(c"/proc/self/setgroups", b"deny")?;
            write_file(c"/proc/self/gid_map", &self.gid_map)?;
            write_file(c"/proc/self/uid_map", &self.uid_map)?;
            let _ = self.mount();
        }
        Ok(())
    }

    /// The mounts of [`ReadOnlyProject::enter`], in its namespace.
    unsafe fn mount(&self) -> io::Result<()> {
        // SAFETY: as in `enter`.
        unsafe {
            // Nothing made here may reach the parent's namespace.
            check(libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            if let Some(scratch) = &self.scratch {
                bind(scratch)?;
            }
            check(libc::mount(
                self.root.as_ptr(),
                self.root.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            ))?;
            let attr = libc::mount_attr {
                attr_set: libc::MOUNT_ATTR_RDONLY,
                attr_clr: 0,
                propagation: 0,
                userns_fd: 0,
            };
            check(libc::syscall(
                libc::SYS_mount_setattr,
                libc::AT_FDCWD,
                self.root.as_ptr(),
                0u32,
                &attr as *const libc::mount_attr,
                std::mem::size_of::<libc::mount_attr>(),
            ) as libc::c_int)?;
            if let Some(cwd) = &self.cwd {
                check(libc::chdir(cwd.as_ptr()))?;
            }
        }
        Ok(())
    }
}

/// Binds `path` onto itself: a mount of its own, which the project's
/// read-only mount (made after) does not change.
unsafe fn bind(path: &CString) -> io::Result<()> {
    // SAFETY: the caller's; `path` is NUL-terminated and lives on.
    check(unsafe {
        libc::mount(
            path.as_ptr(),
            path.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    })
}

/// Writes `data` to the file `path` (a `/proc` control file).
unsafe fn write_file(path: &std::ffi::CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: the caller's; open, write and close on our own buffers.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let written = libc::write(fd, data.as_ptr().cast(), data.len());
        libc::close(fd);
        if written != data.len() as isize {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
