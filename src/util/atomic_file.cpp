#include "util/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "util/error.h"

namespace kvsieve {

namespace {
std::string folder_of(const std::string& path) {
    const size_t slash = path.rfind('/');
    if (slash == std::string::npos) return ".";
    return slash == 0 ? "/" : path.substr(0, slash);
}
std::string name_of(const std::string& path) {
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}
bool ends_with(const std::string& s, const std::string& end) {
    return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}
/// ".<name>.XXXXXX.tmp" with six characters of mkostemps, or an earlier version's "<name>.kvseq.tmp".
bool is_temporary(const std::string& n) {
    if (ends_with(n, ".kvseq.tmp")) return true;
    if (n.size() < 13 || n[0] != '.' || !ends_with(n, ".tmp")) return false;
    return n[n.size() - 11] == '.';
}
}  // namespace

void write_file_atomic(const std::string& path, std::string_view data, const std::string& shown) {
    const std::string who = shown.empty() ? path : shown;
    auto failed = [&](const char* what, int err) {
        const std::string msg = cat("cannot write '", who, "': ", what, ": ", std::strerror(err));
        if (err == ENOSPC || err == EDQUOT || err == EFBIG) throw StorageFull(msg);
        throw Error(msg);
    };
    const std::string dir = folder_of(path);
    std::string tmpl = dir + "/." + name_of(path) + ".XXXXXX.tmp";
    // mkostemps: O_CREAT | O_EXCL with mode 0600, so an existing name (a planted link included) is never used.
    const int fd = mkostemps(tmpl.data(), 4, O_CLOEXEC);
    if (fd < 0) failed("cannot create a temporary file in its folder", errno);
    const std::string tmp = tmpl;
    auto abandon = [&](const char* what) {
        const int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        failed(what, err);
    };
    size_t done = 0;
    while (done < data.size()) {
        const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n == 0) errno = ENOSPC;  // a regular file's write takes no byte only when the device is full
        if (n <= 0) abandon("write error");
        done += static_cast<size_t>(n);
    }
    if (::fsync(fd) != 0) abandon("cannot flush it to disk");
    if (::close(fd) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        failed("cannot close it", err);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        failed("cannot rename the temporary file into place", err);
    }
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {  // the rename is durable once the folder is flushed; a folder that cannot be opened keeps it
        ::fsync(dfd);
        ::close(dfd);
    }
}

int remove_stale_temporaries(const std::string& dir) {
    int removed = 0;
    std::vector<std::string> subdirs;
    DIR* d = ::opendir(dir.c_str());
    if (!d) return 0;
    while (const dirent* e = ::readdir(d)) {
        const std::string n = e->d_name;
        if (n == "." || n == "..") continue;
        const std::string p = dir + "/" + n;
        struct stat st;
        if (::lstat(p.c_str(), &st) != 0) continue;
        if (S_ISDIR(st.st_mode))
            subdirs.push_back(p);
        else if ((S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) && is_temporary(n) && ::unlink(p.c_str()) == 0)
            ++removed;
    }
    ::closedir(d);
    for (const std::string& sd : subdirs) {
        DIR* s = ::opendir(sd.c_str());
        if (!s) continue;
        while (const dirent* e = ::readdir(s)) {
            const std::string n = e->d_name;
            const std::string p = sd + "/" + n;
            struct stat st;
            if (::lstat(p.c_str(), &st) != 0) continue;
            if ((S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) && is_temporary(n) && ::unlink(p.c_str()) == 0) ++removed;
        }
        ::closedir(s);
    }
    return removed;
}

}  // namespace kvsieve
