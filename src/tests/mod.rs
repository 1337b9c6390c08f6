mod loom_fd;
